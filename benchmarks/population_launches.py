"""What a GPU would launch: the tensor ops a population dispatches per training update, step by step.

On a GPU a population's small ops are bound by their launches (each op outside a CUDA graph costs a
kernel launch and the dispatcher's few microseconds), not by their arithmetic. This script counts
them on any device, a CPU included: it trains a population of ``P`` fresh pods for ``--updates``
updates after a warm-up round, with every tensor op counted by a ``TorchDispatchMode`` and
attributed to where it was dispatched:

- the graphed steps (``act_step``, ``post_step``, ``advantage_step``, the minibatch update): on a
  GPU each call is one CUDA graph replay, whatever its op count, so their *calls* matter;
- the rest of the rollout and the update (per-pod draws, buffer copies, the epochs' loop): each op
  is a launch or a dispatch on a GPU;
- the env's step (``TradingVecEnv.step``, its eager parts: on a CPU the native kernel's wrapper);
- the round's setup and results (pods copied into and out of their rows), once per round.

    .venv/bin/python benchmarks/population_launches.py                 # P in 16 128, 8 envs per pod
    .venv/bin/python benchmarks/population_launches.py --pods 4 64 --json

Counts depend on ``P`` (per-pod loops) and the network's depth, not on ``N`` or the tickers, so the
defaults are small. The script uses only the population's steps by name, so a copy of it in an
older checkout's ``benchmarks/`` counts that code the same way (a step it lacks is not counted).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from agents.population.learner import PodSetup, Population  # noqa: E402
from agents.ppo import PPOArgs  # noqa: E402
from agents.training import policy_for_env  # noqa: E402
from data.loader import synthetic_market  # noqa: E402
from envs.trading import EnvParams  # noqa: E402
from envs.vec_env import TradingVecEnv  # noqa: E402

GRAPHED = ("act_step", "post_step", "advantage_step")


class OpCounter(TorchDispatchMode):
    """Counts every dispatched op under the label set by :meth:`under`."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()
        self.label = "round setup and results"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.counts[self.label] += 1
        return func(*args, **(kwargs or {}))

    def under(self, label: str, fn: Any) -> Any:
        def wrapped(*a: Any, **k: Any) -> Any:
            before, self.label = self.label, label
            try:
                return fn(*a, **k)
            finally:
                self.label = before

        return wrapped


def count(num_pods: int, num_envs: int, tickers: int, updates: int) -> dict[str, Any]:
    market = synthetic_market(num_tickers=tickers, num_sessions=6, seed=0).train
    params = EnvParams(decision_interval=15, episode_len=64)
    make_env = lambda n: TradingVecEnv(market, params, n, "cpu", 0)  # noqa: E731
    base = PPOArgs()
    pop = Population(
        make_env,
        config=policy_for_env(None, make_env(1), base, "ppo")[0].config,
        num_pods=num_pods,
        num_envs=num_envs,
        num_steps=base.num_steps,
        num_minibatches=base.num_minibatches,
    )

    def setups(num_updates: int) -> list[PodSetup]:
        steps = num_updates * base.batch_size(num_envs)
        return pop.fresh_pods([PPOArgs(seed=seed, total_steps=steps) for seed in range(num_pods)])

    pop.train(setups(1))  # warm-up
    counter = OpCounter()
    calls: collections.Counter[str] = collections.Counter()

    def graphed(name: str, step: Any) -> None:
        fn = step.fn

        def call() -> None:
            calls[name] += 1
            counter.under("graphed steps", fn)()

        step.fn = call

    for name in GRAPHED:
        if hasattr(pop, name):
            graphed(name, getattr(pop, name))
    for step in pop.mb_steps.values():
        graphed("minibatch update", step)
    pop._rollout = counter.under("rollout, outside the graphs", pop._rollout)
    pop._update = counter.under("update, outside the graphs", pop._update)
    pop.env.step = counter.under("env step", pop.env.step)
    work = setups(updates)
    with counter:
        pop.train(work)
    per_update = {k: v / updates for k, v in counter.counts.items() if k != "round setup and results"}
    return {
        "pods": num_pods,
        "num_envs": num_envs,
        "ops_per_update": per_update,
        "graphed_calls_per_update": {k: v / updates for k, v in calls.items()},
        "round_setup_and_results_ops": counter.counts["round setup and results"],
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, nargs="+", default=[16, 128])
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--tickers", type=int, default=10)
    p.add_argument("--updates", type=int, default=2)
    p.add_argument("--json", action="store_true", help="print one JSON list instead of the table")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = [count(n, args.num_envs, args.tickers, args.updates) for n in args.pods]
    if args.json:
        print(json.dumps(rows, indent=2))
        return rows
    for row in rows:
        print(f"P = {row['pods']} pods x {row['num_envs']} envs, per training update:")
        for label, ops in row["ops_per_update"].items():
            if label != "graphed steps":
                print(f"  {label:<30} {ops:>9,.0f} ops")
        graphed = ", ".join(f"{k} {v:g}" for k, v in row["graphed_calls_per_update"].items())
        print(f"  {'graphed steps (calls)':<30} {graphed}")
        print(f"  (once per round: setup and results {row['round_setup_and_results_ops']:,} ops)")
    return rows


if __name__ == "__main__":
    main()
