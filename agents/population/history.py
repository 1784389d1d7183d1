"""A population's training metrics: kept per pod and update on the device (rows of a ``(metrics, P)``
tensor, no host read inside the round), and turned once per round into each pod's
``TrainResult.history``, the rows ``agents.ppo.train`` logs (the same keys, the same meaning)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from agents.ppo import PPOArgs

METRICS = (
    "reward_sum",  # env rewards of the rollout
    "cost_sum",  # costs paid in the rollout
    "finished_return",  # sum of the returns of the episodes that ended in the rollout
    "finished_length",  # sum of their lengths
    "finished",  # how many ended
    "policy_loss",  # of the pod's last minibatch
    "value_loss",
    "entropy",
    "approx_kl",
    "clipfrac_sum",  # summed over the pod's minibatches
    "minibatches",  # the pod's minibatch steps in the update
    "explained_variance",
    "log_std",  # mean log-std after the update
)
(
    REWARD_SUM,
    COST_SUM,
    FINISHED_RETURN,
    FINISHED_LENGTH,
    FINISHED,
    POLICY_LOSS,
    VALUE_LOSS,
    ENTROPY,
    APPROX_KL,
    CLIPFRAC_SUM,
    MINIBATCHES,
    EXPLAINED_VARIANCE,
    LOG_STD,
) = range(len(METRICS))


@dataclass
class UpdateLog:
    """One update of a population: which pods trained, their metrics (still on the device), timings."""

    training: list[bool]  # (P,)
    stats: Tensor  # (len(METRICS), P)
    timing: dict[str, float]  # rollout_s, update_s, elapsed_s (host clock; the whole population's)


def pod_history(
    logs: Sequence[UpdateLog],
    values: Sequence[Sequence[Sequence[float]]],
    slot: int,
    args: PPOArgs,
    num_envs: int,
) -> list[dict[str, float]]:
    """The history rows of pod ``slot`` (its trained updates only); ``values`` is the logs' stats
    read back, ``(updates, metrics, P)``."""
    history: list[dict[str, float]] = []
    count = args.batch_size(num_envs)
    for log, table in zip(logs, values, strict=True):
        if not log.training[slot]:
            continue
        v = [row[slot] for row in table]
        steps = count * (len(history) + 1)
        frac = 1.0 - len(history) / args.num_updates(num_envs) if args.anneal_lr else 1.0
        row = {"charts/mean_reward": v[REWARD_SUM] / count, "charts/mean_cost": v[COST_SUM] / count}
        if v[FINISHED] > 0:
            row["charts/episodic_return"] = v[FINISHED_RETURN] / v[FINISHED]
            row["charts/episodic_length"] = v[FINISHED_LENGTH] / v[FINISHED]
        row.update(
            {
                "losses/policy_loss": v[POLICY_LOSS],
                "losses/value_loss": v[VALUE_LOSS],
                "losses/entropy": v[ENTROPY],
                "losses/approx_kl": v[APPROX_KL],
                "losses/clipfrac": v[CLIPFRAC_SUM] / max(v[MINIBATCHES], 1.0),
                "losses/explained_variance": v[EXPLAINED_VARIANCE],
                "losses/log_std": v[LOG_STD],
                "env_steps": float(steps),
                "update": float(len(history) + 1),
                "charts/learning_rate": frac * args.learning_rate,
                "charts/steps_per_s": steps / max(log.timing["elapsed_s"], 1e-9),
                "charts/rollout_s": log.timing["rollout_s"],
                "charts/update_s": log.timing["update_s"],
                "charts/elapsed_s": log.timing["elapsed_s"],
            }
        )
        history.append(row)
    return history
