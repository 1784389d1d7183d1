"""Where one PPO iteration spends its time: rollout and update, phase by phase.

    .venv/bin/python benchmarks/ppo_profile.py                    # 256 envs x 100 assets, CPU
    .venv/bin/python benchmarks/ppo_profile.py --envs 1024 --compile on
    .venv/bin/python benchmarks/ppo_profile.py --device cuda --json

Runs ``agents.ppo.train`` unchanged (default network and PPO settings, the synthetic market of
``benchmarks/train_throughput.py``) with timers wrapped around the functions it calls, and prints
per-iteration milliseconds: rollout = observation statistics + normalization, policy forward
(pack, network, sampling), env step, the rest (buffer writes, episode bookkeeping); update =
minibatch gathers, loss forward, backward, gradient clipping, optimizer step, the rest (GAE, Python).
The first iteration (warm-up, compile) is not counted. On CUDA every timer synchronizes, so the
phases add up but the total is slower than an unprofiled run.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from agents import ppo, training
from app.config import Config, to_env_params
from data.loader import synthetic_market
from envs.vec_env import TradingVecEnv

TIMES: dict[str, float] = defaultdict(float)


def _timed(name: str, fn: Callable[..., Any], sync: bool) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if sync:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        if sync:
            torch.cuda.synchronize()
        TIMES[name] += time.perf_counter() - start
        return out

    return wrapper


def profile(num_envs: int, assets: int, iterations: int, device: str, compile: str) -> dict[str, Any]:
    sync = device.startswith("cuda")
    config = Config()
    market = synthetic_market(num_tickers=assets, num_sessions=10, seed=0, device=device).train
    env = TradingVecEnv(market, to_env_params(config.env), num_envs=num_envs, device=device, seed=0)
    agent = config.agent
    args = ppo.PPOArgs(
        seed=0,
        total_steps=(iterations + 1) * agent.num_steps * num_envs,
        compile=compile,
        **{k: getattr(agent, k) for k in ("learning_rate", "gamma", "gae_lambda", "num_steps", "embed")},
        **{k: getattr(agent, k) for k in ("update_epochs", "num_minibatches", "hidden", "max_grad_norm")},
    )
    env.step = _timed("rollout/env step", env.step, sync)
    patches: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, attr: str, name: str) -> None:
        original = getattr(owner, attr)
        patches.append((owner, attr, original))
        setattr(owner, attr, _timed(name, original, sync))

    original_make = training.make_policy

    def make_policy(*a: Any, **k: Any):  # noqa: ANN202 - wraps the new policy's methods
        policy = original_make(*a, **k)
        norm = policy.obs_norm
        norm.update = _timed("rollout/obs statistics + normalize", norm.update, sync)
        norm.normalize = _timed("rollout/obs statistics + normalize", norm.normalize, sync)
        policy.net.pack = _timed("rollout/policy forward", policy.net.pack, sync)
        policy.dist_params_packed = _timed("rollout/policy forward", policy.dist_params_packed, sync)
        return policy

    original_loss_fn = ppo._loss_fn
    patches.append((training, "make_policy", original_make))
    training.make_policy = make_policy
    ppo._loss_fn = lambda a, key: _timed("update/loss forward", original_loss_fn(a, key), sync)
    patch(torch, "index_select", "update/minibatch gathers")
    patch(torch.Tensor, "backward", "update/backward")
    patch(torch.nn.utils, "clip_grad_norm_", "update/gradient clipping")
    patch(torch.optim.Adam, "step", "update/optimizer step")
    patch(ppo, "collect_rollout", "rollout (total)")
    patch(ppo, "update", "update (total)")
    try:
        warm = {}

        def first_iteration_done(event: dict[str, Any]) -> bool:
            if event["event"] == "update" and event["update"] == 1.0:
                warm.update(TIMES)
            return True

        ppo.train(args, env, callbacks=[first_iteration_done])
    finally:
        for owner, attr, original in reversed(patches):
            setattr(owner, attr, original)
        ppo._loss_fn = original_loss_fn
    ms = {k: 1e3 * (v - warm.get(k, 0.0)) / iterations for k, v in TIMES.items()}
    TIMES.clear()
    for part in ("rollout", "update"):
        inner = sum(v for k, v in ms.items() if k.startswith(f"{part}/"))
        ms[f"{part}/rest"] = ms[f"{part} (total)"] - inner
    samples = args.num_steps * num_envs
    total = ms["rollout (total)"] + ms["update (total)"]
    return {
        "num_envs": num_envs,
        "num_assets": assets,
        "device": device,
        "compile": compile,
        "threads": torch.get_num_threads(),
        "ms_per_iteration": ms,
        "env_steps_per_s": samples / (total / 1e3),
        "samples_per_iteration": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--assets", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=8, help="timed iterations (after 1 warm-up)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", default="off", choices=("off", "on", "auto"))
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    row = profile(opts.envs, opts.assets, opts.iterations, opts.device, opts.compile)
    if opts.json:
        print(json.dumps(row))
        return
    ms = row["ms_per_iteration"]
    total = ms["rollout (total)"] + ms["update (total)"]
    print(
        f"# {row['num_envs']} envs x {row['num_assets']} assets, {row['device']}, {row['threads']} threads, "
        f"compile {row['compile']}: {row['env_steps_per_s']:,.0f} env-steps/s "
        f"({row['samples_per_iteration']:,} samples per iteration)"
    )
    for key in sorted(ms, key=lambda k: (k.split("/")[0].split(" ")[0], "(total)" not in k, k)):
        print(f"{key:40s} {ms[key]:8.2f} ms  {100 * ms[key] / total:5.1f}%")


if __name__ == "__main__":
    main()
