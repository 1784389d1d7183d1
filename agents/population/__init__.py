"""Pods trained as one batch: the population learner behind the tournament's population backend.

- ``stacked``: P networks, observation normalizers and Adam states with a leading pod axis;
- ``learner``: ``Population``, PPO for P pods in lockstep over one env batch of P x N envs;
- ``formulas``: PPO's formulas with a leading pod axis (actions, GAE, the clipped loss), pure;
- ``pods``: ``PodSetup`` (a pod's starting point for a round) and ``shape_key`` (what its pods share);
- ``history``: the per-pod metrics kept on the device and the history rows made from them;
- ``graphs``: ``StepGraph``, the hot steps as CUDA graphs on a GPU, the same functions elsewhere;
- ``sizing``: how many pods a population holds on a device (memory, and the ``learner_rate`` probe).
"""
