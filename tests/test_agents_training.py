"""The plumbing PPO and SAC share (agents.training): the callback convention (True continues, False
stops, anything else is an error), the evaluation hook and the optimizer restore."""

from __future__ import annotations

import pytest
import torch
from helpers import toy_env

from agents import ppo, sac, training
from agents.networks import NetworkConfig
from agents.policy import PolicyMeta
from data.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def _ppo(**kw):
    return ppo.PPOArgs(**{"total_steps": 4 * 8 * 4, "num_steps": 8, "update_epochs": 1, **kw})


def _sac(**kw):
    base = {"total_steps": 64, "learning_starts": 16, "batch_size": 16, "buffer_size": 256, "num_critics": 2}
    return sac.SACArgs(**{**base, **kw})


# --- callbacks -------------------------------------------------------------------------------------


def test_notify_continues_only_when_every_callback_says_true_and_calls_them_all():
    seen = []

    def recorder(answer):
        def callback(event):
            seen.append((answer, event["event"]))
            return answer

        return callback

    event = {"event": "update"}
    assert training.notify([recorder(True), recorder(True)], event) is True
    assert training.notify([recorder(False), recorder(True)], event) is False
    assert training.notify([], event) is True
    # The callback after the one that asked to stop still saw the event.
    assert seen == [(True, "update"), (True, "update"), (False, "update"), (True, "update")]


@pytest.mark.parametrize("answer", [None, 0, 1, "stop", torch.tensor(True)])
def test_a_callback_returning_anything_but_a_bool_is_an_error(answer):
    def forgetful(event):
        return answer

    with pytest.raises(TypeError, match="forgetful.*not a bool"):
        training.notify([forgetful], {"event": "update"})


@pytest.mark.parametrize("learner", ["ppo", "sac"])
def test_a_callback_that_forgets_to_return_fails_the_run_on_the_first_event(toy, learner):
    calls = []

    def forgot_return(event):
        calls.append(event["event"])

    module, args = (ppo, _ppo()) if learner == "ppo" else (sac, _sac())
    with pytest.raises(TypeError, match="forgot_return returned None, not a bool"):
        module.train(args, toy_env(toy), callbacks=[forgot_return])
    assert calls == ["update"]


@pytest.mark.parametrize("learner", ["ppo", "sac"])
def test_callbacks_returning_true_run_to_the_budget_and_false_stops_after_the_current_row(toy, learner):
    # (eval_every=16: SAC logs a row at every evaluation, so both learners log several rows)
    module, args = (ppo, _ppo(eval_every=16)) if learner == "ppo" else (sac, _sac(eval_every=16))
    score = lambda policy: {"score": 1.0}  # noqa: E731
    full = module.train(args, toy_env(toy), callbacks=[lambda event: True], eval_fn=score)
    assert not full.stopped_by_callback and full.env_steps == args.total_steps and len(full.history) > 1

    events = []

    def first_row_only(event):
        events.append(event["event"])
        return False

    stopped = module.train(args, toy_env(toy), callbacks=[first_row_only, lambda event: True], eval_fn=score)
    assert stopped.stopped_by_callback and len(stopped.history) == 1
    assert events == ["eval", "update"]  # the row's both events, then the run stops
    assert stopped.env_steps < full.env_steps and stopped.history[-1]["eval/score"] == 1.0


# --- evaluation hook -------------------------------------------------------------------------------


def test_eval_hook_schedule_and_final_score(toy):
    calls = []

    def eval_fn(policy):
        calls.append(policy.training)
        return {"score": 2.0, "eval/sharpe": 1.0}

    policy = training.make_policy(toy_env(toy), NetworkConfig(4, 8), PolicyMeta(), seed=0)
    policy.train()
    hook = training.EvalHook(eval_fn, every=100)
    assert not hook.due(99) and hook.due(100) and hook.due(5, last=True)
    assert hook.run(policy, 130) == {"eval/score": 2.0, "eval/sharpe": 1.0}
    assert calls == [False] and policy.training  # evaluated in eval mode, training mode restored
    assert not hook.due(229) and hook.due(230)  # next one `every` env-steps after the last
    history = [{"env_steps": 1.0}, {"env_steps": 2.0}]
    hook.finish(policy, history)  # the last row had no score: evaluated once more
    assert history[-1]["eval/score"] == 2.0 and "eval/score" not in history[0]
    hook.finish(policy, history)
    assert len(calls) == 2  # already scored: not again
    nothing = training.EvalHook(None, every=1)
    assert not nothing.due(10**9, last=True)
    nothing.finish(policy, history)


def test_make_optimizer_restores_moments_with_this_runs_learning_rate(toy):
    first = ppo.train(_ppo(), toy_env(toy))
    policy = first.policy
    optimizer = training.make_optimizer(policy, 1e-4, first.optimizer_state)
    assert optimizer.param_groups[0]["lr"] == 1e-4
    assert optimizer.state_dict()["state"][0]["step"] == first.optimizer_state["state"][0]["step"]
    with pytest.raises(ConfigError, match="optimizer state"):
        training.make_optimizer(policy, 1e-4, {"state": {}, "param_groups": []})
