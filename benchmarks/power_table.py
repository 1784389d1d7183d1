"""The power table: how often the product's verdict finds a planted edge of a given size, for the
tournament's champion, its start, the ridge and boosted baselines and the planted predictor itself.

For each planted level and each of ``--markets`` independent synthetic markets (``--nulls`` at level
0; each market its own seed), it

1. builds the market (``--tickers`` tickers, ``--sessions`` sessions split ``--train-frac`` /
   ``--valid-frac`` / the rest, a test window of at least ``MIN_TEST_SESSIONS`` sessions);
2. runs a tournament on it through the product's workflow (``app.workflows.training.train_tournament``:
   ``--algo`` pods, ``--budget`` env-steps in rounds of ``--round-steps``, the train and validation
   windows only);
3. backtests its columns on the held-out test window (``benchmarks/power_columns.py``: all of them
   in one batched backtest through the env's own step, under the champion's execution rules, each
   then judged as the report judges a champion: ``backtests.report.metrics_document``, the
   out-of-sample test of the alpha over buy-and-hold at the 5% level, one look, seeded):
   ``champion`` (the tournament's), ``start`` (its pod's ridge start before any gradient step),
   ``ridge_quintile`` / ``ridge_softmax`` and ``boosted_quintile`` / ``boosted_softmax`` (the ridge
   of ``backtests.linear`` and the LightGBM ranker of ``backtests.boosted``, each fitted once a
   market, traded top 20% equal weight and the champion's way), ``ppo`` (with ``--with-ppo``: the
   champion of a PPO tournament of ``--ppo-budget`` env-steps, the demo preset's pool, on
   ``--ppo-backend``: the device's by default, local on a CPU), ``oracle``
   (the planted predictor, ``data.synthetic.planted_predictor``, traded the champion's way) and
   ``oracle_quintile`` (the same top 20%: what any learner could at best find). Each keeps its
   verdict, alpha per day and p-value, Sharpe, turnover and costs.

Levels: ``--levels`` are ``data.synthetic``'s ``signal`` of the shape ``--shape`` (the default
``minute_momentum``: the rows and settings of earlier runs read as before); ``--ic`` states them
instead as the planted predictor's realized daily rank IC (``SyntheticSpec.target_ic``, calibrated
per shape: docs/data.md, Planted shapes), the re-planned table's parameterisation. With ``--ic`` a
market's seed is ``--first-seed + 1000 * round(1000 * ic) + index``, and the null markets (IC 0: the
same bars whatever the shape) are shared by the shapes: a run of another shape reads them back
instead of building them again (their ``oracle`` is the shape's that ran them, ``oracle_shape``).

Each market's row is appended to ``--out`` (JSON lines, one atomic append per market) when it ends;
a rerun with the same settings reads the rows back and skips the markets already done, so a long run
can stop and resume (a row written before a column the run writes is run again, with the same seed;
rows written before these columns read with ``linear`` as ``ridge_quintile`` and ``oracle`` as
``oracle_quintile``). Beside the columns a row keeps the champion's tournament: its env-steps,
pods tried, whether the champion is a refitted start (``champion_refit``), the paired ``t`` of a
fine-tuned one over its start (``champion_start_t``), the ``t`` of that difference's alpha over
buy-and-hold (``champion_start_alpha_t``; rows written before it have none) and its pod kind (``champion_kind``: ``intraday``
or ``open``; rows written before it have none). The table: per level and column the power (share of markets significant) with
its two-sided 95% Clopper-Pearson interval, the median p-value and the median test Sharpe; at level
0 the false-positive rate and its one-sided 95% upper bound; a column no row holds shows "-".

    .venv/bin/python benchmarks/power_table.py                     # full size: 16 markets a level, 48 nulls
    .venv/bin/python benchmarks/power_table.py --levels 0 0.42 --markets 2 --nulls 2 --budget 100000
    .venv/bin/python benchmarks/power_table.py --table-only        # the table of the rows so far
    .venv/bin/python benchmarks/power_table.py --levels 0 --shard 1/2   # odd-numbered markets only
    .venv/bin/python benchmarks/power_table.py --jobs 2            # shards 0/2 and 1/2 side by side
    .venv/bin/python benchmarks/power_table.py --rerun-learner     # after a change to the direct learner

The PPO column can run as a pass of its own: a run with ``--with-ppo`` adds it to the rows a run
without it wrote on the same commit (the other columns kept), instead of running those markets again.

``--rerun-learner`` reruns only the columns the direct learner's code makes (the champion, its start,
everything traded the champion's way) on markets whose rows are of another commit, and keeps the
others from those rows (``benchmarks/power_rerun.py``: it refuses when anything else changed).
    .venv/bin/python benchmarks/power_table.py --shape nonlinear --ic 0 0.02 0.05 --tickers 100

``--cost-rate`` overrides the commission (the env's default otherwise; the spread, slippage and
impact stay at their defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agents.args import OBJECTIVES, DirectArgs  # noqa: E402
from agents.ensemble import load_policy  # noqa: E402
from agents.tournament.backend_choice import resolve_backend  # noqa: E402
from app.config import Config, to_env_params, to_learner_args  # noqa: E402
from app.runs import RunDir  # noqa: E402
from app.workflows.training import train_tournament  # noqa: E402
from backtests.boosted import fit_boosted  # noqa: E402
from backtests.linear import fit_linear  # noqa: E402
from benchmarks.power_columns import (  # noqa: E402
    COLUMNS,
    champion_root_args,
    column_policies,
    upgraded,
    verdicts,
)
from benchmarks.power_readout import _fmt, interval, print_table, table, upper_95  # noqa: E402, F401
from benchmarks.power_rerun import (  # noqa: E402
    LEARNER_COLUMNS,
    check_reusable,
    column_commit,
    commit,
    merged,
    same_code,
    verify,
    versions,
)
from data.features import FEATURE_SETS  # noqa: E402
from data.loader import synthetic_market  # noqa: E402
from data.planted import MINUTE_MOMENTUM, SHAPES  # noqa: E402
from data.planted_calibration import MAX_TARGET_IC  # noqa: E402
from data.synthetic import SyntheticSpec, planted_predictor  # noqa: E402

LEVELS = (0.0, 0.15, 0.25, 0.42, 0.7)
MIN_TEST_SESSIONS = 126
#: The PPO column's env-steps: the demo preset's first round (4 pods x 250,000 env-steps).
PPO_BUDGET = 1_000_000
#: The PPO column's backend by default: ``auto``, the product's choice on the tournaments' device
#: (``agents.tournament.backend_choice``): the local backend on a CPU (on the 2-core VM no slower
#: than a population there, docs/benchmarks.md "The table's floor on two cores"), the population
#: backend on CUDA. Rows' keys name the backend resolved.
PPO_BACKEND = "auto"
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "figures" / "power_table.jsonl"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", type=float, nargs="+", default=list(LEVELS), help="planted signal levels")
    p.add_argument("--shape", default=MINUTE_MOMENTUM, choices=SHAPES, help="the planted edge's shape")
    p.add_argument(
        "--ic",
        type=float,
        nargs="+",
        default=None,
        help="planted levels as daily rank IC (replaces --levels)",
    )
    p.add_argument("--markets", type=int, default=16, help="markets per planted level")
    p.add_argument("--nulls", type=int, default=48, help="markets at level 0")
    p.add_argument("--budget", type=int, default=250_000, help="env-steps per tournament")
    p.add_argument("--round-steps", type=int, default=50_000)
    p.add_argument("--pods", type=int, default=2)
    p.add_argument("--algo", default="direct", choices=("ppo", "sac", "direct"))
    p.add_argument(
        "--features",
        default="small",
        choices=FEATURE_SETS,
        help="the markets' feature set ([data] features): small (eight) or library (30)",
    )
    p.add_argument("--tickers", type=int, default=40)
    p.add_argument("--sessions", type=int, default=216)
    p.add_argument("--train-frac", type=float, default=60 / 216)
    p.add_argument("--valid-frac", type=float, default=30 / 216)
    p.add_argument("--cost-rate", type=float, default=None, help="commission (default: the env's)")
    p.add_argument("--first-seed", type=int, default=5000)
    p.add_argument("--workers", type=int, default=0, help="local worker processes (0 = inline)")
    p.add_argument(
        "--device",
        default="cpu",
        help="the tournaments' device ([agent] device; on cuda [tournament] backend auto trains the pods "
        "on the population backend); the markets, baselines and backtests stay on the CPU. Other than cpu, "
        "part of the rows' settings key",
    )
    p.add_argument(
        "--start-single-share",
        type=float,
        default=None,
        help="direct learner: [agent] start_single_share for the champion's pods and the start column "
        "(unset: the learner's default; other than 0.5, it is part of the rows' settings key)",
    )
    p.add_argument(
        "--start-products",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="direct learner: [agent] start_products (a quadratic of a screened pair of features a candidate "
        "of the open pods' nonlinear start) for the champion's pods and the start column (unset: the "
        "learner's default); when on, part of the rows' settings key",
    )
    p.add_argument(
        "--start-crossfit",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="direct learner: [agent] start_crossfit (the open pods' member networks judged at the epochs "
        "the other folds choose) for the champion's pods and the start column (unset: the learner's "
        "default); when on, part of the rows' settings key",
    )
    p.add_argument(
        "--refit-alpha",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="direct learner: [agent] refit_alpha (the refit judges a fine-tuned champion against its start "
        "by the alpha over buy-and-hold of their daily difference) for the champion's tournament (unset: "
        "the learner's default); when on, part of the rows' settings key",
    )
    p.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default=None,
        help="direct learner: [agent] objective for the champion's pods (unset: the learner's default); "
        "other than excess_sharpe, part of the rows' settings key",
    )
    p.add_argument("--with-ppo", action="store_true", help="add the ppo column (a PPO tournament a market)")
    p.add_argument("--ppo-budget", type=int, default=PPO_BUDGET, help="env-steps of the PPO tournament")
    p.add_argument("--ppo-pods", type=int, default=4, help="pods of the PPO tournament (the demo's)")
    p.add_argument("--ppo-round-steps", type=int, default=250_000, help="its round (the demo's)")
    p.add_argument(
        "--ppo-backend",
        choices=("auto", "local", "population"),
        default=PPO_BACKEND,
        help="the PPO tournament's [tournament] backend (auto: the device's choice, local on a CPU); the "
        "rows' key names the one resolved",
    )
    p.add_argument(
        "--shard",
        default="0/1",
        help="K/N: run only the markets whose index is K modulo N (N processes side by side share one --out)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="processes side by side, one shard each (one intra-op thread each: 2 on a 2-core machine)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON-lines rows (resumable)")
    p.add_argument(
        "--rerun-learner",
        action="store_true",
        help="after a change to the direct learner alone: rerun its columns on markets that have rows, "
        "keep the others (benchmarks/power_rerun.py checks that nothing else changed)",
    )
    p.add_argument(
        "--spot-check",
        type=int,
        default=0,
        metavar="N",
        help="with --rerun-learner: run the first N markets with rows again in full and reuse the other "
        "markets' kept columns only if theirs come out unchanged (benchmarks/power_rerun.py)",
    )
    p.add_argument("--table-only", action="store_true", help="print the table of the rows in --out")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    args = p.parse_args(argv)
    if args.ic is not None:
        if any(not 0.0 <= ic <= MAX_TARGET_IC for ic in args.ic):
            p.error(f"--ic: levels in [0, {MAX_TARGET_IC}]")
        if args.nulls > 1000 or args.markets > 1000:
            p.error("--ic: at most 1000 markets a level (the seeds of two levels would meet)")
        args.levels = args.ic
    test = args.sessions - round(args.sessions * args.train_frac) - round(args.sessions * args.valid_frac)
    if test < MIN_TEST_SESSIONS:
        p.error(f"the test window has {test} sessions; at least {MIN_TEST_SESSIONS} are needed")
    if args.tickers < 40:
        p.error("--tickers: at least 40")
    try:
        k, n = (int(x) for x in args.shard.split("/"))
    except ValueError:
        p.error(f"--shard: K/N with whole numbers, got {args.shard!r}")
    if not 0 <= k < n:
        p.error(f"--shard: K must be in [0, N), got {args.shard!r}")
    args.shard = (k, n)
    if args.jobs < 1:
        p.error(f"--jobs: at least 1, got {args.jobs}")
    if args.start_single_share is not None and not 0.0 <= args.start_single_share <= 1.0:
        p.error(f"--start-single-share: in [0, 1], got {args.start_single_share}")
    if args.spot_check < 0 or (args.spot_check and not args.rerun_learner):
        p.error("--spot-check: a count >= 0, with --rerun-learner")
    if args.jobs > 1 and args.shard != (0, 1):
        p.error("--jobs and --shard: give one of them (--jobs N runs the shards 0/N .. N-1/N)")
    return args


def settings_key(args: argparse.Namespace) -> str:
    """What makes two runs' rows comparable (not the number of markets or levels)."""
    keys = (
        "budget",
        "round_steps",
        "pods",
        "algo",
        "tickers",
        "sessions",
        "train_frac",
        "valid_frac",
        "cost_rate",
    )
    key = ",".join(f"{k}={getattr(args, k)}" for k in keys)
    # The levels' kind and shape, only where they are new: earlier runs' rows keep their key.
    if args.ic is not None:
        key += ",levels=ic"
    elif args.shape != MINUTE_MOMENTUM:
        key += f",shape={args.shape}"
    if args.features != "small":  # (rows of the small set, the first, keep their key)
        key += f",features={args.features}"
    if args.with_ppo:  # (the PPO column's tournament: rows without it keep their key)
        key += f",ppo={args.ppo_budget}/{args.ppo_pods}/{args.ppo_round_steps}/{ppo_backend(args)}"
    # The direct learner's blend share: rows at the half, its first value, keep their key.
    share = effective(args, "start_single_share")
    if args.algo == "direct" and share != 0.5:
        key += f",start_single_share={share:g}"
    # The pair candidate and the cross-fitted judgement, as run (the flag's, or the learner's default,
    # which has changed): rows run without them keep their key.
    if args.algo == "direct" and effective(args, "start_products"):
        key += ",start_products=1"
    if args.algo == "direct" and effective(args, "start_crossfit"):
        key += ",start_crossfit=1"
    if args.algo == "direct" and effective(args, "refit_alpha"):
        key += ",refit_alpha=1"
    if args.algo == "direct" and effective(args, "objective") != "excess_sharpe":
        key += f",objective={effective(args, 'objective')}"
    # The tournaments' device: rows of the CPU, the first, keep their key.
    if args.device != "cpu":
        key += f",device={args.device}"
    return key


#: The direct learner's ``[agent]`` settings a flag may set, each unset (None) by default: the
#: learner's default then. A default may change between tables, so a row's key names the value run.
START_FLAGS = ("start_single_share", "start_products", "start_crossfit", "refit_alpha", "objective")


def effective(args: argparse.Namespace, name: str):
    """A setting of :data:`START_FLAGS` as the champion's pods and the start column run with it: the
    flag's (``--name``, or ``--no-name`` for a boolean), or the learner's default."""
    flag = getattr(args, name)
    return getattr(DirectArgs(), name) if flag is None else flag


def row_shape(args: argparse.Namespace, level: float) -> str:
    """The shape a row belongs to: with ``--ic``, the null markets (the same bars for every shape)
    belong to all of them (``"null"``)."""
    return "null" if args.ic is not None and level == 0 else args.shape


def market_seed(args: argparse.Namespace, level: float, index: int) -> int:
    """Each (level, market) its own seed: independent markets."""
    if args.ic is not None:
        return args.first_seed + 1000 * round(level * 1000) + index
    return args.first_seed + 1000 * round(level * 100) + index


def market_spec(args: argparse.Namespace, level: float) -> dict:
    """The ``[data]`` keys of the planted market: the shape, and the level as ``signal`` or
    ``target_ic``."""
    if args.ic is not None:
        return {"shape": args.shape, "target_ic": level}
    return {"shape": args.shape, "signal": level}


def config_of(args: argparse.Namespace, seed: int, level: float) -> Config:
    env = {"num_envs": 64}
    if args.cost_rate is not None:
        env["cost_rate"] = args.cost_rate
    agent: dict = {"algo": args.algo, "seed": seed, "device": args.device}
    if args.algo == "direct":
        agent.update(batch_paths=32, horizon=16)  # the learner's defaults otherwise
        agent.update({name: getattr(args, name) for name in START_FLAGS if getattr(args, name) is not None})
    return Config().with_updates(
        data={
            "source": "synthetic",
            "num_tickers": args.tickers,
            "num_sessions": args.sessions,
            "train_frac": args.train_frac,
            "valid_frac": args.valid_frac,
            "seed": seed,
            "features": args.features,
            **market_spec(args, level),
        },
        env=env,
        agent=agent,
        tournament={
            "pods": args.pods,
            "leaderboard_size": 2 * args.pods,
            "round_steps": args.round_steps,
            "budget_steps": args.budget,
            "budget_minutes": None,
            "workers": args.workers,
            "seed": seed,
        },
    )


def market_splits(config: Config, seed: int):
    """The synthetic market of one row, split into train / validation / test as ``config`` says."""
    data = config.data
    return synthetic_market(
        num_tickers=data.num_tickers,
        num_sessions=data.num_sessions,
        seed=seed,
        signal=data.signal,
        train_frac=data.train_frac,
        valid_frac=data.valid_frac,
        shape=data.shape,
        target_ic=data.target_ic,
        feature_set=data.features,
    )


def ppo_backend(args: argparse.Namespace) -> str:
    """The PPO column's backend as it runs: ``--ppo-backend``, ``auto`` resolved on ``--device``."""
    return resolve_backend(args.ppo_backend, args.device, "ppo")


def ppo_config(args: argparse.Namespace, seed: int, level: float) -> Config:
    """The PPO column's tournament: the demo preset's pool (``--ppo-pods`` pods in rounds of
    ``--ppo-round-steps``) for ``--ppo-budget`` env-steps, PPO's defaults otherwise, the same market."""
    config = config_of(args, seed, level)
    return config.with_updates(
        agent={"algo": "ppo", "seed": seed},
        tournament={
            "pods": args.ppo_pods,
            "leaderboard_size": 2 * args.ppo_pods,
            "round_steps": min(args.ppo_round_steps, args.ppo_budget),
            "budget_steps": args.ppo_budget,
            "backend": ppo_backend(args),
        },
    )


def champion_of(config: Config, home: Path, run: str, splits) -> tuple[object, object]:
    """The tournament's result and its champion (on the CPU)."""
    result = train_tournament(config, home, run=run, splits=splits)
    return result, load_policy(RunDir(home, run).champion, device="cpu")


def run_market(
    args: argparse.Namespace, level: float, index: int, columns: tuple[str, ...] | None = None
) -> dict:
    """One market's row: its ``columns`` (every column of the run by default), each judged on the
    test window; a tournament runs only for a column that needs it."""
    wanted = run_columns(args) if columns is None else columns
    seed = market_seed(args, level, index)
    config = config_of(args, seed, level)
    start = time.perf_counter()
    home = Path(tempfile.mkdtemp(prefix="podracer-power-"))
    try:
        data = config.data
        splits = market_splits(config, seed)
        spec = SyntheticSpec(
            num_tickers=data.num_tickers,
            num_sessions=data.num_sessions,
            seed=seed,
            signal=data.signal,
            shape=data.shape,
            target_ic=data.target_ic,
        )
        predictor = planted_predictor(spec)
        if predictor.shape[0] != splits.full.num_steps:
            raise SystemExit("error: the planted predictor does not line up with the market's bars")
        clock = {"data_s": time.perf_counter() - start}
        policies, extra = {}, {}
        if "champion" in wanted:
            result, policies["champion"] = champion_of(config, home, "power", splits)
            extra = {
                "env_steps": result.env_steps,
                "pods_tried": result.pods_tried,
                "champion_refit": (result.champion or {}).get("refit"),  # (agents.tournament.refit)
                "champion_kind": ((result.champion or {}).get("hparams") or {}).get("kind"),
                **{
                    f"champion_{name}": (RunDir(home, "power").info().extra.get("refit") or {}).get(name)
                    for name in ("start_t", "start_alpha_t")
                },
            }
            clock["tournament_s"] = time.perf_counter() - start - sum(clock.values())
        if "ppo" in wanted:
            ppo_result, policies["ppo"] = champion_of(ppo_config(args, seed, level), home, "ppo", splits)
            extra.update(ppo_env_steps=ppo_result.env_steps, ppo_pods_tried=ppo_result.pods_tried)
            clock["ppo_s"] = time.perf_counter() - start - sum(clock.values())
        params = to_env_params(config.env)
        fitted = {
            "linear": fit_linear(splits.train, splits.valid, params.decision_interval),
            "boosted": fit_boosted(splits.train, splits.valid, params.decision_interval),
        }
        clock["fit_s"] = time.perf_counter() - start - sum(clock.values())
        learner = to_learner_args(config)
        if "champion" in wanted:  # the champion's lineage's kind and seed (its start, its way)
            learner = champion_root_args(
                learner, result.run_dir, result.champion, splits.train, params.decision_interval
            )
        policies.update(column_policies(splits, params, learner, fitted, predictor))
        policies = {name: policies[name] for name in COLUMNS if name in policies and name in wanted}
        judged = verdicts(splits.test, params, policies, seed)
        clock["backtest_s"] = time.perf_counter() - start - sum(clock.values())
        row = {
            "settings_key": settings_key(args),
            "commit": commit(),
            "versions": versions(),
            "level": level,
            "index": index,
            "seed": seed,
            "shape": row_shape(args, level),
            "oracle_shape": args.shape,
            "strength": spec.strength,
            "test_sessions": len(np.unique(splits.test.session_dates())),
            **extra,
            "linear_valid_ic": fitted["linear"].valid_ic,
            "linear_penalty": fitted["linear"].penalty,
            "boosted_valid_ic": fitted["boosted"].valid_ic,
            "boosted_trees": fitted["boosted"].num_trees,
            "columns": list(judged),
            **judged,
        }
        row["wall_s"] = round(time.perf_counter() - start, 1)
        row.update({key: round(value, 1) for key, value in clock.items()})
        return row
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_columns(args: argparse.Namespace) -> tuple[str, ...]:
    """The columns a run of ``args`` writes."""
    return tuple(c for c in COLUMNS if c != "ppo" or args.with_ppo)


def read_rows(path: Path) -> Iterator[dict]:
    """Each row of a power-table file, in order: a torn last write (a kill) is skipped with a
    warning, anything else that is not a row is a one-line error."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            if line.startswith("{") and not line.rstrip().endswith("}"):  # a write cut short by a kill
                print(
                    f"warning: {path}:{number}: a torn row, ignored (its market runs again)", file=sys.stderr
                )
                continue
            sys.exit(f"error: {path}:{number}: not a power-table row ({exc})")
        if not isinstance(row, dict) or not {"level", "index"} <= set(row):
            sys.exit(f"error: {path}:{number}: not a power-table row (no level and index)")
        yield row


def load_rows(path: Path, key: str, shapes: tuple[str, ...] = ()) -> dict[tuple[float, int], dict]:
    """The rows of ``path`` run with settings ``key`` (and, given ``shapes``, of those shapes: rows
    written before rows had a shape are ``minute_momentum``'s), with today's column names
    (``power_columns.upgraded``); of two rows of one market, the later."""
    if not path.exists():
        return {}
    rows = {}
    for row in read_rows(path):
        if row.get("settings_key") == key and (not shapes or row.get("shape", MINUTE_MOMENTUM) in shapes):
            rows[(float(row["level"]), int(row["index"]))] = upgraded(row)
    return rows


def append_row(path: Path, row: dict) -> None:
    """One market's row, appended in one write and fsynced (a kill loses at most the market running)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torn = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with path.open("a") as out:
        out.write(("\n" if torn else "") + json.dumps(row) + "\n")  # a torn last row stays its own line
        out.flush()
        os.fsync(out.fileno())


def run_jobs(argv: list[str], jobs: int) -> None:
    """``jobs`` processes of this script side by side, shard ``k/jobs`` each; exits on a failed one."""
    script = str(Path(__file__).resolve())
    children = [  # their tables go to stderr: stdout is the parent's table (or its JSON)
        subprocess.Popen(
            [sys.executable, script, *argv, "--jobs", "1", "--shard", f"{k}/{jobs}"], stdout=sys.stderr
        )
        for k in range(jobs)
    ]
    failed = [k for k, child in enumerate(children) if child.wait() != 0]
    if failed:
        sys.exit(f"error: shard(s) {', '.join(f'{k}/{jobs}' for k in failed)} failed (their error above)")


def run_one(
    args: argparse.Namespace, done: dict, level: float, index: int, without_ppo: dict | None = None
) -> None:
    """Run market ``index`` of ``level`` unless its row is done: a row written before a column this
    run writes is run again (the same seed); with ``--rerun-learner`` a complete row whose learner
    columns are of another commit gets them rerun and keeps the rest; with ``--with-ppo``, a row of
    the same settings without the PPO column (``without_ppo``) whose every column is of the commit
    checked out gets the PPO column alone (:func:`with_ppo_added`)."""
    wanted = run_columns(args)
    have = done.get((float(level), index))
    complete = have is not None and set(wanted) <= set(have["columns"])
    if complete and not (args.rerun_learner and not same_code(column_commit(have, "champion"), commit())):
        return
    base = (without_ppo or {}).get((float(level), index))
    if (
        not complete
        and base is not None
        and all(same_code(column_commit(base, c), commit()) for c in base["columns"])
    ):
        row = with_ppo_added(args, base, level, index)
    elif complete:
        # a null row shared by the shapes keeps its oracle's shape: another shape's reruns both oracles
        oracles = ("oracle_quintile",) if have.get("oracle_shape", args.shape) != args.shape else ()
        rerun = (*LEARNER_COLUMNS, *oracles)
        check_reusable(have, tuple(c for c in wanted if c not in rerun))
        row = merged(have, run_market(args, level, index, rerun), rerun, COLUMNS)
    else:
        row = run_market(args, level, index)
    append_row(args.out, row)
    done[(float(level), index)] = row
    summary = ", ".join(f"{n} {row[n]['outcome']} (p {_fmt(row[n]['alpha_p_value'], '.2g')})" for n in wanted)
    print(f"level {level} market {index}: {summary}; {row['wall_s']} s", file=sys.stderr, flush=True)


def with_ppo_added(args: argparse.Namespace, base: dict, level: float, index: int) -> dict:
    """``base`` (a row of these settings without ``--with-ppo``) with the PPO column run on its market
    (the same seed) and the key of the settings with it: the PPO tournament, about half of a market's
    time, can run as a pass of its own after the other columns."""
    row = merged(base, run_market(args, level, index, ("ppo",)), ("ppo",), COLUMNS)
    row["settings_key"] = settings_key(args)
    return row


def spot_check(args: argparse.Namespace, done: dict) -> None:
    """``--spot-check N``: the first ``N`` markets of this shard whose rows are complete and of
    another commit, run again in full; their kept columns must come out unchanged
    (``power_rerun.verify``), and the fresh rows replace the old ones."""
    left = args.spot_check
    wanted = run_columns(args)
    for level in args.levels:
        shard, shards = args.shard
        for index in range(args.nulls if level == 0 else args.markets):
            have = done.get((float(level), index))
            if left <= 0 or index % shards != shard or have is None:
                continue
            if not set(wanted) <= set(have["columns"]) or same_code(
                column_commit(have, "champion"), commit()
            ):
                continue
            new = run_market(args, level, index)
            verify(have, new, tuple(c for c in wanted if c not in LEARNER_COLUMNS))
            append_row(args.out, new)
            done[(float(level), index)] = new
            left -= 1
            print(f"spot check: level {level} market {index}: the kept columns unchanged", file=sys.stderr)


def main(argv: list[str] | None = None) -> list[dict]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    key = settings_key(args)
    commit()  # the code this process runs, read before any market
    if args.jobs > 1 and not args.table_only:
        run_jobs([a for a in argv if a != "--json"], args.jobs)
    done = load_rows(args.out, key, (args.shape, "null"))
    if not args.table_only and args.jobs == 1:
        torch.set_num_threads(1)
        spot_check(args, done)
        without_ppo = None
        if args.with_ppo:
            plain = settings_key(argparse.Namespace(**{**vars(args), "with_ppo": False}))
            without_ppo = load_rows(args.out, plain, (args.shape, "null"))
        for level in args.levels:
            shard, shards = args.shard
            for index in range(args.nulls if level == 0 else args.markets):
                if index % shards == shard:
                    run_one(args, done, level, index, without_ppo)
    rows = [r for (level, _), r in sorted(done.items()) if level in {float(x) for x in args.levels}]
    result = table(rows)
    if args.json:
        print(json.dumps({"settings": key, "shape": args.shape, "table": result}, indent=2))
    else:
        print(f"settings: {key}; shape {args.shape}, levels as {'daily IC' if args.ic else 'signal'}")
        print_table(result)
    return result


if __name__ == "__main__":
    main()
