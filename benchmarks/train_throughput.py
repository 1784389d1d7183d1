"""PPO training throughput: env-steps consumed per second (rollout + update) with the default network.

    .venv/bin/python benchmarks/train_throughput.py                      # 64/256/1024 envs x 100 assets, CPU
    .venv/bin/python benchmarks/train_throughput.py --envs 256 --threads 2
    .venv/bin/python benchmarks/train_throughput.py --device cuda        # on a GPU when there is one
    .venv/bin/python benchmarks/train_throughput.py --envs 8 --assets 10 --updates 1   # smoke run

For each ``num_envs`` it trains PPO (``app.config`` defaults: 32 steps per rollout, 4 epochs of 4
minibatches, embed 16, hidden 64) on a synthetic market and reports, after one warm-up update:

- ``env_steps_per_s``: env-steps per second of the whole training loop (rollout + update);
- ``rollout_steps_per_s``: the rollout alone (policy forward + env step);
- ``update_us_per_sample``: update time per sample (all epochs), and per sample per epoch;
- the network size: parameters and multiply-adds per sample (``agents.networks.flops_per_sample``).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from agents.networks import flops_per_sample, num_parameters
from agents.ppo import PPOArgs, train
from app.config import Config, to_env_params
from data.loader import synthetic_market
from envs.vec_env import TradingVecEnv


def measure(
    num_envs: int,
    num_assets: int,
    sessions: int,
    updates: int,
    device: str,
    compile: str = "off",
    seed: int = 0,
) -> dict:
    config = Config()
    market = synthetic_market(num_tickers=num_assets, num_sessions=sessions, seed=seed, device=device).train
    params = to_env_params(config.env)
    env = TradingVecEnv(market, params, num_envs=num_envs, device=device, seed=seed)
    fields = {
        "learning_rate",
        "gamma",
        "gae_lambda",
        "num_steps",
        "update_epochs",
        "num_minibatches",
        "clip_coef",
        "ent_coef",
        "vf_coef",
        "max_grad_norm",
        "embed",
        "hidden",
    }
    defaults = {k: v for k, v in config.agent.model_dump().items() if k in fields}
    total = (updates + 1) * defaults["num_steps"] * num_envs
    args = PPOArgs(seed=seed, total_steps=total, compile=compile, **defaults)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = train(args, env)
    wall = time.perf_counter() - start
    rows = result.history[1:] or result.history  # drop the warm-up update
    rollout_s = sum(r["charts/rollout_s"] for r in rows)
    update_s = sum(r["charts/update_s"] for r in rows)
    samples = len(rows) * args.batch_size(num_envs)
    net = result.policy.net
    return {
        "num_envs": num_envs,
        "num_assets": num_assets,
        "num_features": env.num_features,
        "device": device,
        "threads": torch.get_num_threads(),
        "compile": compile,
        "env_steps_per_s": samples / (rollout_s + update_s),
        "rollout_share": rollout_s / (rollout_s + update_s),
        "rollout_steps_per_s": samples / rollout_s,
        "update_us_per_sample": 1e6 * update_s / samples,
        "update_us_per_sample_epoch": 1e6 * update_s / samples / args.update_epochs,
        "parameters": num_parameters(net),
        "macs_per_sample": flops_per_sample(net.config)["total"],
        "updates_timed": len(rows),
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="64,256,1024", help="comma-separated num_envs")
    parser.add_argument("--assets", type=int, default=100)
    parser.add_argument(
        "--sessions", type=int, default=10, help="synthetic sessions (60%% is the train window)"
    )
    parser.add_argument(
        "--updates", type=int, default=6, help="timed PPO updates per setting (after 1 warm-up)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--compile",
        default="off,on",
        help="PPOArgs.compile settings to measure, comma-separated (off: eager loss; on: torch.compile; "
        "the first, warm-up update with the compile is not timed)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads [default: torch's]")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    if not opts.json:
        print(
            f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, device {opts.device}"
        )
    for num_envs in (int(x) for x in opts.envs.split(",")):
        base = None
        for mode in opts.compile.split(","):
            row = measure(num_envs, opts.assets, opts.sessions, opts.updates, opts.device, mode)
            base = base or row["env_steps_per_s"]
            row["ratio_to_first"] = row["env_steps_per_s"] / base
            if opts.json:
                print(json.dumps(row), flush=True)
                continue
            print(
                f"{num_envs:5d} envs x {row['num_assets']} assets ({row['threads']} threads, "
                f"compile {mode}): "
                f"{row['env_steps_per_s']:9,.0f} env-steps/s  (rollout {row['rollout_steps_per_s']:9,.0f}/s, "
                f"update {row['update_us_per_sample']:.1f} us/sample = "
                f"{row['update_us_per_sample_epoch']:.1f} us/sample/epoch; rollout "
                f"{100 * row['rollout_share']:.0f}% of the time)  x{row['ratio_to_first']:.2f}  "
                f"net {row['parameters']:,} params, {row['macs_per_sample']:,} MACs/sample",
                flush=True,
            )


if __name__ == "__main__":
    main()
