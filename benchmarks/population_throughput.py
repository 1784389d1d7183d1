"""Population backend vs local workers: aggregate training env-steps/s, pods per minute, FLOP/s.

Two parts, both in this one process run (the baselines beside the population, same machine, same
data, the product's default network and PPO settings):

- **grid** (default): for every population size ``P`` (``--pods``) and envs per pod ``N``
  (``--num-envs``): one :class:`agents.population.learner.Population` of ``P`` fresh pods trains
  ``--updates`` updates after one warm-up round (CUDA graphs recorded there), timed; the baseline
  is ``--workers`` local worker processes each training one pod of ``N`` envs with ``ppo.train``
  at the same time (what the ``local`` backend runs). Printed per row: aggregate training
  env-steps/s, pods per minute (training only: ``60 * env-steps/s / --round-steps``), the FLOP/s
  that achieves (``agents.networks.flops_per_sample``; one env-step costs a rollout forward, a
  bootstrap forward and ``update_epochs`` forward + backward passes, ~3 forwards each) and its
  fraction of the device's peak (a table of known GPU peaks; on a CPU a float32 matmul measured
  here), and the population's speed-up over the local workers.
- **demo** (``--demo-seconds S``): the demo's tournament (``podracer demo``'s default preset: 100
  tickers, 243 sessions, 256 envs per pod, 250k env-steps per round) for a wall-time budget of
  ``S`` seconds, with the ``local`` backend (``--workers`` processes) and with the ``population``
  backend: env-steps trained and pods tried by each, the ratios, and for the population backend its
  rounds' seconds by phase (setup, train, validation, files: the line each population round logs).

    .venv/bin/python benchmarks/population_throughput.py --quick          # tiny sizes: does it run
    .venv/bin/python benchmarks/population_throughput.py                   # the grid (CPU: small)
    .venv/bin/python benchmarks/population_throughput.py --demo-seconds 360 --no-grid --workers 8
        # on a GPU: the 6-minute demo, population vs 8 local workers
    .venv/bin/python benchmarks/population_throughput.py --algo direct --pods 1 4 --updates 3
        # the direct learner (the default): a population of P pods vs local workers, one pod each

``--algo direct`` (grid): the pods are direct pods (``agents.population.direct``, the default
``DirectArgs``, each from its ridge start, made before the clock starts) training ``--updates``
updates each; the baseline is ``--workers`` processes each running ``agents.direct.train`` of one pod
from the same start. An env-step is one simulated decision of one path (held-out runs included);
the N column is the pods' ``batch_paths``, and no FLOP/s are printed. ``--algo`` with ``--demo-seconds``
sets the demo's learner (default: the preset's, the direct learner), and the demo also prints each
backend's champion: its validation score and Sharpe and its Sharpe on the test window.

Defaults: on CUDA ``--pods 1 8 32 128 --num-envs 256 1024``, ``--workers`` the CPU cores (at most
8); on a CPU ``--pods 1 4 --num-envs 64 256`` and 2 workers (a few minutes). ``--out FILE`` writes the
figures as JSON.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import copy
import dataclasses
import json
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from agents import direct  # noqa: E402
from agents.networks import flops_per_sample  # noqa: E402
from agents.policy import Policy  # noqa: E402
from agents.population.direct import start_direct_pod, train_population  # noqa: E402
from agents.population.learner import PodSetup, Population  # noqa: E402
from agents.ppo import PPOArgs, train  # noqa: E402
from agents.tournament.orchestrator import run_tournament  # noqa: E402
from agents.tournament.pod import score_policy  # noqa: E402
from agents.training import policy_for_env  # noqa: E402
from app.config import to_tournament_args  # noqa: E402
from app.workflows.demo import build_config, machine  # noqa: E402
from backtests.metrics import TRADING_DAYS_PER_YEAR
from data.loader import load_market, synthetic_market  # noqa: E402
from data.market import MarketData  # noqa: E402
from envs.trading import EnvParams  # noqa: E402
from envs.vec_env import TradingVecEnv  # noqa: E402

#: Peak throughput of known GPUs, TFLOP/s: (float32 without tensor cores, TF32 tensor cores, dense).
#: From the vendors' data sheets; matched on torch.cuda.get_device_name (first match wins).
KNOWN_PEAKS = (
    ("H100 PCIe", 51.2, 378.0),
    ("H100", 66.9, 494.7),  # SXM
    ("H200", 66.9, 494.7),
    ("A100", 19.5, 156.0),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--pods", type=int, nargs="+", default=[1, 8, 32, 128] if cuda else [1, 4])
    p.add_argument("--num-envs", type=int, nargs="+", default=[256, 1024] if cuda else [64, 256])
    p.add_argument("--workers", type=int, default=max(1, min(os.cpu_count() or 1, 8)) if cuda else 2)
    p.add_argument("--tickers", type=int, default=100)
    p.add_argument("--sessions", type=int, default=60, help="grid: sessions of the synthetic market")
    p.add_argument("--updates", type=int, default=3, help="grid: timed updates per measurement")
    p.add_argument("--round-steps", type=int, default=250_000, help="env-steps of a pod round")
    p.add_argument("--no-graphs", action="store_true", help="population: no CUDA graphs")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="grid: torch threads of the population (default on a CPU: cores / --workers, as the "
        "backend's CPU worker lanes get)",
    )
    p.add_argument("--no-grid", action="store_true")
    p.add_argument("--no-local", action="store_true", help="skip the local-worker baselines")
    p.add_argument("--demo-seconds", type=float, default=0.0, help="also run the demo tournament (0: skip)")
    p.add_argument("--demo-sessions", type=int, default=None, help="demo: sessions (default: the preset's)")
    p.add_argument("--population-size", type=int, default=0, help="demo: pods per population (0: auto)")
    p.add_argument("--backends", nargs="+", default=["local", "population"], help="demo: backends to run")
    p.add_argument("--algo", choices=["ppo", "direct"], default=None, help="the learner (grid default: ppo)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: check that the script runs")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.pods, args.num_envs, args.tickers, args.sessions, args.updates = [1, 2], [8], 5, 4, 1
        args.workers, args.round_steps = 1, 1024
        if args.demo_seconds:
            args.demo_seconds, args.demo_sessions, args.population_size = min(args.demo_seconds, 20.0), 20, 2
    return args


def _env(market: MarketData, params: EnvParams, num_envs: int, device: str) -> TradingVecEnv:
    return TradingVecEnv(market, params, num_envs, device, 0)


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


# --- peaks and FLOPs -----------------------------------------------------------------------------
def device_peak(device: str) -> tuple[str, float | None, str]:
    """``(device name, peak FLOP/s or None, what the peak is)``."""
    if torch.device(device).type == "cuda":
        name = torch.cuda.get_device_name()
        for key, fp32, tf32 in KNOWN_PEAKS:
            if key in name:
                tf32_on = torch.backends.cuda.matmul.allow_tf32
                return name, (tf32 if tf32_on else fp32) * 1e12, "TF32 dense" if tf32_on else "FP32"
        return name, None, "n/a (unknown GPU)"
    return "cpu", cpu_matmul_peak(), "FP32 matmul measured"


def cpu_matmul_peak(size: int = 1024, reps: int = 5) -> float:
    """FLOP/s of a float32 ``size`` x ``size`` matmul on this CPU (the best of ``reps``)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best


def flops_per_env_step(args: PPOArgs, config) -> float:
    """Training FLOPs of one env-step: a rollout forward, a bootstrap forward, and per update epoch a
    forward and a backward (~2 forwards) over the sample; 2 FLOPs per multiply-add."""
    macs = flops_per_sample(config)["total"]
    return 2.0 * macs * (2 + 3 * args.update_epochs)


# --- the grid ------------------------------------------------------------------------------------
def population_rate(
    market: MarketData,
    params: EnvParams,
    num_pods: int,
    num_envs: int,
    updates: int,
    device: str,
    graphs: bool | None,
) -> tuple[float, Population]:
    """Aggregate training env-steps/s of a population of ``num_pods`` fresh pods (timed after a warm-up round)."""
    base = PPOArgs()
    pop = Population(
        lambda n: _env(market, params, n, device),
        config=policy_for_env(None, _env(market, params, 1, device), base, "ppo")[0].config,
        num_pods=num_pods,
        num_envs=num_envs,
        num_steps=base.num_steps,
        num_minibatches=base.num_minibatches,
        graphs=graphs,
    )

    def round_of(num_updates: int) -> list[PodSetup]:
        steps = num_updates * base.batch_size(num_envs)
        return pop.fresh_pods([PPOArgs(seed=seed, total_steps=steps) for seed in range(num_pods)])

    pop.train(round_of(1))  # warm-up: allocation, CUDA graph recording
    setups = round_of(updates)
    _sync(device)
    t0 = time.perf_counter()
    pop.train(setups)
    _sync(device)
    return num_pods * updates * base.batch_size(num_envs) / (time.perf_counter() - t0), pop


def _single_rate(
    market: MarketData, params: EnvParams, num_envs: int, updates: int, device: str, threads: int
) -> float:
    """One local worker: ``ppo.train`` of one pod, timed after a one-update warm-up."""
    torch.set_num_threads(threads)
    base = PPOArgs()
    env = _env(market, params, num_envs, device)
    train(PPOArgs(total_steps=base.batch_size(num_envs), compile="off"), env)
    args = PPOArgs(total_steps=updates * base.batch_size(num_envs), compile="off")
    _sync(device)
    t0 = time.perf_counter()
    train(args, env)
    _sync(device)
    return args.total_steps / (time.perf_counter() - t0)


def local_rate(
    market: MarketData, params: EnvParams, num_envs: int, updates: int, device: str, workers: int
) -> float:
    """Aggregate env-steps/s of ``workers`` processes each training one pod at the same time."""
    threads = max(1, (os.cpu_count() or 1) // workers) if torch.device(device).type == "cpu" else 1
    mp = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(workers, mp_context=mp) as pool:
        jobs = [
            pool.submit(_single_rate, market, params, num_envs, updates, device, threads)
            for _ in range(workers)
        ]
        return sum(job.result() for job in jobs)


def grid(args: argparse.Namespace) -> list[dict]:
    if args.algo == "direct":
        return direct_grid(args)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    elif torch.device(args.device).type == "cpu":  # as the backend's CPU worker lanes get them
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.workers))
    splits = synthetic_market(num_tickers=args.tickers, num_sessions=args.sessions, seed=0)
    market = splits.train
    params = EnvParams(decision_interval=15, episode_len=64)
    name, peak, peak_kind = device_peak(args.device)
    ppo_args = PPOArgs()
    graphs = False if args.no_graphs else None
    print(
        f"device {name}; peak {peak / 1e12 if peak else float('nan'):.2f} TFLOP/s ({peak_kind}); "
        f"{args.tickers} tickers, {market.num_features} features; population: {torch.get_num_threads()} "
        f"thread(s); local baseline: {args.workers} worker(s)"
    )
    header = f"{'P':>5}{'N':>6}{'env-steps/s':>14}{'pods/min':>10}{'TFLOP/s':>9}{'of peak':>9}{'local/s':>12}{'x local':>9}"
    print(header)
    rows = []
    local_cache: dict[int, float] = {}
    for num_envs in args.num_envs:
        if not args.no_local and num_envs not in local_cache:
            local_cache[num_envs] = local_rate(
                market, params, num_envs, args.updates, args.device, args.workers
            )
        for num_pods in args.pods:
            try:
                rate, pop = population_rate(
                    market, params, num_pods, num_envs, args.updates, args.device, graphs
                )
            except torch.OutOfMemoryError:
                print(f"{num_pods:>5}{num_envs:>6}  out of memory")
                continue
            flops = rate * flops_per_env_step(ppo_args, pop.config)
            local = local_cache.get(num_envs)
            row = {
                "pods": num_pods,
                "num_envs": num_envs,
                "env_steps_per_s": rate,
                "pods_per_min": 60.0 * rate / args.round_steps,
                "flops_per_s": flops,
                "fraction_of_peak": flops / peak if peak else None,
                "local_env_steps_per_s": local,
                "speedup_vs_local": rate / local if local else None,
                "graphs": pop.act_step.mode,
            }
            rows.append(row)
            del pop
            print(
                f"{num_pods:>5}{num_envs:>6}{rate:>14,.0f}{row['pods_per_min']:>10.1f}{flops / 1e12:>9.3f}"
                f"{(row['fraction_of_peak'] or float('nan')):>9.2%}{(local or float('nan')):>12,.0f}"
                f"{(row['speedup_vs_local'] or float('nan')):>9.2f}",
                flush=True,
            )
    return rows


# --- the grid of direct pods ----------------------------------------------------------------------
def _direct_pods(market: MarketData, params: EnvParams, seeds: list[int], updates: int, device: str):
    """``(args, started policy)`` of fresh direct pods (the default ``DirectArgs``; ridge start)."""
    env = _env(market, params, 1, device)
    base = direct.DirectArgs()
    pods = []
    for seed in seeds:
        args = direct.DirectArgs(seed=seed, total_steps=updates * base.batch_paths * base.horizon)
        policy, _ = policy_for_env(None, env, args, "direct")
        start_direct_pod(policy, args, market, params.decision_interval)
        pods.append((args, policy))
    return env, pods


def _single_direct_rate(
    market: MarketData, params: EnvParams, updates: int, device: str, threads: int
) -> float:
    """One local worker: ``direct.train`` of one pod from its ridge start (made before the clock)."""
    torch.set_num_threads(threads)
    env, [(args, policy)] = _direct_pods(market, params, [0], updates, device)
    direct.train(dataclasses.replace(args, total_steps=1), env, init=policy)  # warm-up (first calls)
    _sync(device)
    t0 = time.perf_counter()
    steps = direct.train(args, env, init=policy).env_steps
    _sync(device)
    return steps / (time.perf_counter() - t0)


def direct_grid(args: argparse.Namespace) -> list[dict]:
    """``--algo direct``: aggregate env-steps/s of P direct pods in one population, and of
    ``--workers`` local worker processes each training one pod at the same time."""
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // args.workers))
    market = synthetic_market(num_tickers=args.tickers, num_sessions=args.sessions, seed=0).train
    params = EnvParams(decision_interval=15, episode_len=64)
    local = None
    if not args.no_local:
        threads = max(1, (os.cpu_count() or 1) // args.workers)
        mp = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(args.workers, mp_context=mp) as pool:
            jobs = [
                pool.submit(_single_direct_rate, market, params, args.updates, args.device, threads)
                for _ in range(args.workers)
            ]
            local = sum(job.result() for job in jobs)
    print(
        f"direct pods on {args.device}; {args.tickers} tickers, {market.num_features} features; population: "
        f"{torch.get_num_threads()} thread(s); local baseline: {args.workers} worker(s), {local or 0:,.0f} env-steps/s"
    )
    rows = []
    for num_pods in args.pods:
        env, pods = _direct_pods(market, params, list(range(num_pods)), args.updates, args.device)
        warm = [PodSetup(copy.deepcopy(p), None, dataclasses.replace(a, total_steps=1)) for a, p in pods]
        train_population(warm, market, params)  # warm-up (first calls; it trains copies)
        setups = [PodSetup(policy, None, a) for a, policy in pods]
        _sync(args.device)
        t0 = time.perf_counter()
        results, _stack = train_population(setups, market, params)
        _sync(args.device)
        rate = sum(r.env_steps for r in results) / (time.perf_counter() - t0)
        rows.append(
            {"algo": "direct", "pods": num_pods, "env_steps_per_s": rate, "local_env_steps_per_s": local}
        )
        ratio = rate / local if local else float("nan")
        print(f"  P {num_pods:>4}: {rate:>12,.0f} env-steps/s ({ratio:.2f}x the local workers)", flush=True)
    return rows


# --- the demo ------------------------------------------------------------------------------------
def demo(args: argparse.Namespace, root: Path) -> dict:
    host = machine()
    config, _ = build_config(
        "default",
        config_path=None,
        data_source="synthetic",
        signal=None,
        seed=None,
        minutes=args.demo_seconds / 60.0,
        workers=args.workers,
        machine={**host, "device": args.device},
    )
    data = {"num_tickers": args.tickers}
    if args.demo_sessions is not None:
        data["num_sessions"] = args.demo_sessions
    tour = {"round_steps": args.round_steps} if args.quick else {}
    config = config.with_updates(
        data=data, tournament=tour, **({"env": {"num_envs": 16}} if args.quick else {})
    )
    if args.algo is not None:
        config = config.with_updates(agent={"algo": args.algo})
    splits = load_market(config.data, home=root / "home", device="cpu")
    print(
        f"demo: {splits.full.num_assets} tickers, {splits.full.num_sessions} sessions, "
        f"{config.env.num_envs} envs per pod, {args.demo_seconds:.0f} s per backend on {args.device}"
    )
    out = {}
    for backend in args.backends:
        sized = {"population_size": args.population_size, "pods": None} if backend == "population" else {}
        cfg = config.with_updates(tournament={"backend": backend, "population_size": 0, **sized})
        rounds = _PhaseSums()
        t0 = time.perf_counter()
        with rounds:
            result = run_tournament(
                root / f"demo-{backend}",
                splits.train,
                splits.valid,
                args=to_tournament_args(cfg),
                env=cfg.env.model_dump(),
                agent=cfg.agent.model_dump(),
                device=args.device,
                annualization=TRADING_DAYS_PER_YEAR,
            )
        wall = time.perf_counter() - t0
        out[backend] = {"env_steps": result.env_steps, "pods_tried": result.pods_tried, "wall_s": wall}
        out[backend]["champion"] = champion_figures(result, splits, cfg)
        print(
            f"  {backend:<11} {result.env_steps:>14,} env-steps ({result.env_steps / wall:,.0f}/s), "
            f"{result.pods_tried} pods tried, wall {wall:.0f} s; champion {out[backend]['champion']}",
            flush=True,
        )
        if rounds.count:
            out[backend]["population_rounds"] = rounds.count
            out[backend]["phase_seconds"] = dict(rounds.sums)
            # Training's share of the whole run's wall time: the device's busy share, estimated.
            out[backend]["train_share"] = rounds.sums.get("train_s", 0.0) / wall
            parts = ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in rounds.sums.items())
            print(f"  {'':<11} {rounds.count} population rounds, in all: {parts}", flush=True)
            print(
                f"  {'':<11} training {100 * out[backend]['train_share']:.0f}% of the wall time", flush=True
            )
    if "local" in out and "population" in out:
        local, pop = out["local"], out["population"]
        ratios = {
            "env_steps": pop["env_steps"] / max(local["env_steps"], 1),
            "pods_tried": pop["pods_tried"] / max(local["pods_tried"], 1),
        }
        out["ratios"] = ratios
        print(f"  population / local: {ratios['env_steps']:.2f}x env-steps, {ratios['pods_tried']:.2f}x pods")
    return out


def champion_figures(result, splits, cfg) -> dict:
    """The champion's validation score and Sharpe (its leaderboard row) and its test-window Sharpe."""
    if result.champion is None:
        return {}
    policy = Policy.load(result.run_dir / "champion")
    params = EnvParams(
        **{k: v for k, v in cfg.env.model_dump().items() if k in EnvParams.__dataclass_fields__}
    )
    _score, metrics, _returns = score_policy(policy, splits.test, params)
    return {
        "pod": result.champion["pod_id"],
        "valid_score": result.champion["score"],
        "valid_sharpe": (result.champion.get("metrics") or {}).get("sharpe_ratio"),
        "test_sharpe": metrics.get("sharpe_ratio"),
    }


class _PhaseSums(logging.Handler):
    """Sums the seconds by phase of the population rounds the backend logs (``extra["phases"]``)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count, self.sums = 0, {}
        self._logger = logging.getLogger("agents.tournament.population_backend")
        self._level = self._logger.level

    def emit(self, record: logging.LogRecord) -> None:
        phases = getattr(record, "phases", None)
        if phases:
            self.count += 1
            for key, seconds in phases.items():
                if key.endswith("_s"):  # (seconds; a round's share is not summed)
                    self.sums[key] = self.sums.get(key, 0.0) + float(seconds)

    def __enter__(self) -> _PhaseSums:
        self._logger.addHandler(self)
        if self._logger.getEffectiveLevel() > logging.INFO:
            self._logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    figures: dict = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    root = Path(tempfile.mkdtemp(prefix="podracer-population-"))
    try:
        if not args.no_grid:
            figures["grid"] = grid(args)
        if args.demo_seconds > 0:
            figures["demo"] = demo(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return figures


if __name__ == "__main__":
    main()
