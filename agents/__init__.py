"""Learners and the trained artifact.

- ``networks``: ``PerAssetActorCritic`` (per-asset encoder shared across assets + pooled context);
- ``normalize``: running observation statistics, frozen outside training;
- ``policy``: ``Policy`` (``act``/``save``/``load``, safetensors + JSON);
- ``checkpoint``: ``Checkpoint`` (a policy plus its optimizer state, for warm starts and children);
- ``ppo``, ``sac``: the learners, ``train(args, env, callbacks, init, eval_fn) -> TrainResult``;
- ``rollout``: PPO's worker side: rollout storage, ``collect_rollout``, ``compute_gae``;
- ``training``: what they share: ``TrainResult``, the ``Callback`` protocol (``False`` stops, as in
  Stable-Baselines3), the optimizer, the starting policy and the evaluation hook;
- ``validation``: the validation score a learner logs while training (``validation_score_fn``);
- ``tournament``: the podracer tournament built on them.
"""
