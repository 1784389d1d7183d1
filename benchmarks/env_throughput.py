"""Env-steps per second of the batched trading env (and of the plain-Python reference env).

    python benchmarks/env_throughput.py --device cpu --num-assets 100 --num-envs 1,64,1024,4096 [--json]

A toy market (``data.toy.toy_market``: ``--sessions`` x 390 one-minute bars, ``--num-features``
features per asset) on ``--device``; random actions drawn before timing (a small pool, cycled);
``--warmup`` steps, then ``--steps`` timed steps of the default ``envs.trading.step`` (action
validation on). One env-step is one decision of one env.

``--fast both`` (the default; ``--compile`` is an alias) times every batch size twice in the same
process: eagerly and with ``step(..., fast=True)``, and prints the ratio; ``off`` / ``on`` time one of
them. The fast path is the native C kernel on CPU (``envs.kernels.native``; built, or loaded from its
cache, in the warm-up) and ``torch.compile`` elsewhere (compiled in the warm-up, not timed); each
result names it (``"kernel"``). ``--native off`` takes ``torch.compile`` on CPU too.
``TradingVecEnv`` takes each fast kernel from its ``envs.fast_step`` threshold by default
(``fast_step="auto"``).

``--execution both`` times every case with the execution model off (``envs.execution.FRICTIONLESS``)
and on (the ``EnvParams`` defaults: spread, volume cap, square-root impact, minimum order), one after
the other in the same process, and prints on/off: the ratio stays fair on a machine others share.
``on`` (the default) / ``off`` time one of them.

``--features small|library`` replaces the toy market's random features with that feature set's
(``data.features``: computed from the toy bars, normalized on the first 60% of them; 8 or 26 per
asset), so the env-steps/s of the two sets can be compared, and prints the seconds the set took to
compute once (on ``--device``); without it, ``--num-features`` random features.

``--cost-model both`` times every case at the cost model's defaults (``new``: the Alpaca fee profile,
the half-spread estimated per name and time of day, the order's impact memory) and at :data:`OLD_COSTS`
(``old``: the flat 20 bp commission, the constant half-spread, no impact memory) in the same process,
and prints new/old: the price of the model's terms on the same kernels (the kernels' own cost, e.g.
the impact memory's row, is paid by both).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.features import compute_set, feature_windows, fit_normalization, make_spec, normalize  # noqa: E402
from data.fold_market import market_bars  # noqa: E402
from data.toy import toy_market  # noqa: E402
from envs import trading  # noqa: E402
from envs.execution import FRICTIONLESS  # noqa: E402
from envs.fast_step import step_kernel  # noqa: E402
from envs.kernels import native  # noqa: E402
from envs.reference import ReferenceEnv  # noqa: E402
from envs.trading import EnvParams  # noqa: E402

#: ``--cost-model old``: the flat-commission profile, the constant half-spread, each fill's impact on its own.
OLD_COSTS = {"broker": "flat", "spread": "fixed", "impact_decay": 1.0}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_batched(
    market, params: EnvParams, num_envs: int, steps: int, warmup: int, seed: int = 0, fast: bool = False
) -> tuple[float, float, str]:
    """Wall and process-CPU seconds per batched step (median of 3 timed blocks each), and the
    kernel that ran (``envs.fast_step.step_kernel``)."""
    device = market.device
    gen = torch.Generator().manual_seed(seed)
    state, _ = trading.reset(market, params, num_envs, gen)
    pool = [torch.rand(num_envs, market.num_assets, generator=gen).to(device) * 0.02 for _ in range(8)]
    for i in range(warmup):
        state, *_ = trading.step(market, params, state, pool[i % len(pool)], fast=fast)
    _sync(device)
    blocks, cpu_blocks = [], []
    per_block = max(1, steps // 3)
    for _ in range(3):
        start, cpu_start = time.perf_counter(), time.process_time()
        for i in range(per_block):
            state, *_ = trading.step(market, params, state, pool[i % len(pool)], fast=fast)
        _sync(device)
        blocks.append((time.perf_counter() - start) / per_block)
        cpu_blocks.append((time.process_time() - cpu_start) / per_block)
    return sorted(blocks)[1], sorted(cpu_blocks)[1], step_kernel(market, params, state, fast)


def bench_reference(market, params: EnvParams, seconds: float, seed: int = 0) -> float:
    """Reference env-steps per second (one env, plain Python)."""
    market = market.to("cpu")
    gen = torch.Generator().manual_seed(seed)
    state, _ = trading.reset(market, params, 1, gen)
    env = ReferenceEnv(market, params, int(state.t[0]), int(state.rng[0]))
    actions = (torch.rand(16, market.num_assets, generator=gen) * 0.02).tolist()
    env.step(actions[0])
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions[count % len(actions)])
        count += 1
    return count / (time.perf_counter() - start)


def with_feature_set(market, feature_set: str):
    """``market`` with ``feature_set``'s features computed from its bars and normalized on its first
    60%, and the seconds they took."""
    device = market.device
    _sync(device)
    start = time.perf_counter()
    windows = feature_windows(feature_set, market.interval)
    raw = compute_set(market_bars(market), windows)
    _sync(device)
    seconds = time.perf_counter() - start
    mean, std = fit_normalization(raw[: int(0.6 * market.num_steps)])
    spec = make_spec(mean, std, windows, interval=market.interval)
    features = normalize(raw, spec)
    return dataclasses.replace(
        market, features=features, feature_names=tuple(spec["names"]), feature_spec=spec
    ), seconds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--num-assets", type=int, default=100)
    parser.add_argument("--num-features", type=int, default=8)
    parser.add_argument(
        "--features", choices=("small", "library"), default=None, help="a feature set's real features"
    )
    parser.add_argument("--num-envs", default="1,64,1024,4096", help="comma-separated batch sizes")
    parser.add_argument("--sessions", type=int, default=60, help="390-bar sessions in the toy market")
    parser.add_argument("--steps", type=int, default=300, help="timed steps per batch size")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--reference-seconds", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch default)")
    parser.add_argument(
        "--fast", "--compile", choices=("both", "off", "on"), default="both", help="fast path"
    )
    parser.add_argument("--native", choices=("on", "off"), default="on", help="CPU fast path: native kernel")
    parser.add_argument(
        "--execution", choices=("both", "off", "on"), default="on", help="the env's execution model"
    )
    parser.add_argument(
        "--cost-model", choices=("both", "new", "old"), default="new", help="the costs' settings (see above)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)

    if args.native == "off":
        os.environ[native.DISABLE_ENV] = "0"
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but no CUDA device is available")
    sizes = [int(x) for x in args.num_envs.split(",") if x.strip()]
    market = toy_market(
        num_steps=args.sessions * 390,
        num_assets=args.num_assets,
        num_features=args.num_features,
        device=device,
    )
    feature_seconds = None
    if args.features:
        market, feature_seconds = with_feature_set(market, args.features)
        if not args.json:
            print(
                f"features {args.features}: {market.num_features} per asset, computed in "
                f"{feature_seconds:.2f} s ({market.num_steps} bars x {market.num_assets} assets on {device})",
                flush=True,
            )
    # episode_len 256, not the env's default of 64: a shorter episode adds autoresets to the timing,
    # and every figure of this benchmark is measured with 256.
    modes = {"both": (False, True), "off": (False,), "on": (True,)}[args.fast]
    executions = {"both": (False, True), "off": (False,), "on": (True,)}[args.execution]
    cost_models = {"both": ("old", "new"), "new": ("new",), "old": ("old",)}[args.cost_model]
    results = []
    for num_envs, fast, execution, model in (
        (n, f, e, m) for n in sizes for f in modes for e in executions for m in cost_models
    ):
        costs = OLD_COSTS if model == "old" else {}
        params = EnvParams(episode_len=256, **{**costs, **({} if execution else FRICTIONLESS)})
        sec, cpu_sec, kernel = bench_batched(market, params, num_envs, args.steps, args.warmup, fast=fast)
        results.append(
            {
                "num_envs": num_envs,
                "num_assets": args.num_assets,
                "num_features": market.num_features,
                "feature_set": args.features,
                "device": str(device),
                "fast": fast,
                "execution": execution,
                "cost_model": model,
                "kernel": kernel,
                "env_steps_per_s": num_envs / sec,
                "ms_per_step": sec * 1e3,
                "cpu_ms_per_step": cpu_sec * 1e3,
            }
        )
        if not args.json:
            ratio = ""
            if model == "new" and len(cost_models) == 2:
                ratio = f"  costs new/old {results[-2]['ms_per_step'] / results[-1]['ms_per_step']:.2f}"
            elif execution and len(executions) == 2:  # against the same costs' row with execution off
                off = results[-1 - len(cost_models)]
                ratio = f"  execution on/off {off['ms_per_step'] / results[-1]['ms_per_step']:.2f}"
            elif fast and len(modes) == 2 and len(executions) == 1:
                ratio = f"  {results[-2]['ms_per_step'] / results[-1]['ms_per_step']:.2f}x eager"
            print(
                f"{num_envs:>7} envs x {args.num_assets} assets on {device} "
                f"{kernel:<13} execution {'on ' if execution else 'off'} costs {model}: "
                f"{num_envs / sec:>14,.0f} env-steps/s  {sec * 1e3:8.3f} ms/step "
                f"({cpu_sec * 1e3:.3f} ms CPU){ratio}",
                flush=True,
            )
    params = EnvParams(episode_len=256)
    ref = bench_reference(market, params, args.reference_seconds)
    out = {"results": results, "reference_steps_per_s": ref, "feature_seconds": feature_seconds}
    if args.json:
        print(json.dumps(out))
    else:
        best = max(results, key=lambda r: r["env_steps_per_s"])
        print(
            f"reference (plain Python, 1 env): {ref:,.0f} env-steps/s; "
            f"batched best ({best['num_envs']} envs) is {best['env_steps_per_s'] / ref:,.0f}x faster"
        )
    return out


if __name__ == "__main__":
    main()
