"""The power table: how often the product's verdict finds a planted edge of a given size, for the
tournament's champion, for the linear baseline and for the planted predictor itself.

For each planted level and each of ``--markets`` independent synthetic markets (``--nulls`` at level
0; each market its own seed), it

1. builds the market (``--tickers`` tickers, ``--sessions`` sessions split ``--train-frac`` /
   ``--valid-frac`` / the rest, a test window of at least ``MIN_TEST_SESSIONS`` sessions);
2. runs a tournament on it through the product's workflow (``app.workflows.training.train_tournament``:
   ``--algo`` pods, ``--budget`` env-steps in rounds of ``--round-steps``, the train and validation
   windows only);
3. backtests three strategies on the held-out test window, each through the env's own step with the
   same costs, and states each one's verdict as the report does (``backtests.report.metrics_document``:
   the out-of-sample test against buy-and-hold at the 5% level, one look, seeded):
   - ``champion``: the tournament's champion;
   - ``linear``: the linear baseline (``backtests.linear``: ridge on the features, fitted on the train
     window, penalty by the validation window, its top 20% held equal weight);
   - ``oracle``: the planted predictor (``data.synthetic.planted_predictor``: for the default shape the
     trailing 520-bar sum of the idiosyncratic returns, which no feature shows whole) traded the same
     way as the linear baseline: what any learner could at best find.

Levels: ``--levels`` are ``data.synthetic``'s ``signal`` of the shape ``--shape`` (the default
``minute_momentum``: the rows and settings of earlier runs read as before); ``--ic`` states them
instead as the planted predictor's realized daily rank IC (``SyntheticSpec.target_ic``, calibrated
per shape: docs/data.md, Planted shapes), the re-planned table's parameterisation. With ``--ic`` a
market's seed is ``--first-seed + 1000 * round(1000 * ic) + index``, and the null markets (IC 0: the
same bars whatever the shape) are shared by the shapes: a run of another shape reads them back
instead of building them again (their ``oracle`` is the shape's that ran them, ``oracle_shape``).

Each market's row is appended to ``--out`` (JSON lines, one atomic append per market) when it ends;
a rerun with the same settings reads the rows back and skips the markets already done, so a long run
can stop and resume. The table: per level and strategy the power (share of markets significant) with
its two-sided 95% Clopper-Pearson interval; at level 0 the false-positive rate and its one-sided 95%
upper bound.

    .venv/bin/python benchmarks/power_table.py                     # full size: 16 markets a level, 48 nulls
    .venv/bin/python benchmarks/power_table.py --levels 0 0.42 --markets 2 --nulls 2 --budget 100000
    .venv/bin/python benchmarks/power_table.py --table-only        # the table of the rows so far
    .venv/bin/python benchmarks/power_table.py --levels 0 --shard 1/2   # odd-numbered markets only
    .venv/bin/python benchmarks/power_table.py --shape nonlinear --ic 0 0.02 0.05 --tickers 100

``--cost-rate`` overrides the commission (the env's default otherwise; the spread, slippage and
impact stay at their defaults).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy.stats import beta as beta_distribution  # noqa: E402

from agents.ensemble import load_policy  # noqa: E402
from app.config import Config, to_env_params  # noqa: E402
from app.runs import RunDir  # noqa: E402
from app.workflows.training import train_tournament  # noqa: E402
from backtests import engine, report  # noqa: E402
from backtests.linear import fit_linear, top_weights  # noqa: E402
from backtests.metrics import TRADING_DAYS_PER_YEAR
from backtests.metrics_model import ExcessFigures, OosTest  # noqa: E402
from data.loader import synthetic_market  # noqa: E402
from data.planted import MINUTE_MOMENTUM, SHAPES  # noqa: E402
from data.planted_calibration import MAX_TARGET_IC  # noqa: E402
from data.synthetic import SyntheticSpec, planted_predictor  # noqa: E402
from envs.observation import TRADABLE, split_obs  # noqa: E402

LEVELS = (0.0, 0.15, 0.25, 0.42, 0.7)
MIN_TEST_SESSIONS = 126
STRATEGIES = ("champion", "linear", "oracle")
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
    p.add_argument("--tickers", type=int, default=40)
    p.add_argument("--sessions", type=int, default=216)
    p.add_argument("--train-frac", type=float, default=60 / 216)
    p.add_argument("--valid-frac", type=float, default=30 / 216)
    p.add_argument("--cost-rate", type=float, default=None, help="commission (default: the env's)")
    p.add_argument("--first-seed", type=int, default=5000)
    p.add_argument("--workers", type=int, default=0, help="local worker processes (0 = inline)")
    p.add_argument(
        "--shard",
        default="0/1",
        help="K/N: run only the markets whose index is K modulo N (N processes side by side share one --out)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON-lines rows (resumable)")
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
    return key


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
    agent: dict = {"algo": args.algo, "seed": seed}
    if args.algo == "direct":
        agent.update(batch_paths=32, horizon=16)  # the learner's defaults otherwise
    return Config().with_updates(
        data={
            "source": "synthetic",
            "num_tickers": args.tickers,
            "num_sessions": args.sessions,
            "train_frac": args.train_frac,
            "valid_frac": args.valid_frac,
            "seed": seed,
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
    )


class Oracle:
    """The planted predictor traded like the linear baseline: at decision ``k`` (bar ``k * interval`` of
    the window, the ``k``-th call: the engine calls a policy once per decision, in order) the top 20%
    of the tradable assets by the planted predictor (``planted_predictor``), equal weight."""

    def __init__(self, predictor: np.ndarray, offset: int, interval: int, num_features: int) -> None:
        self.predictor = torch.as_tensor(predictor, dtype=torch.float32)
        self.offset, self.interval, self.num_features, self.calls = offset, interval, num_features, 0

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        bar = self.offset + self.calls * self.interval
        self.calls += 1
        scores = self.predictor[bar].to(obs.device).expand(obs.shape[0], -1)
        _, block = split_obs(obs, scores.shape[-1], self.num_features)
        return top_weights(scores, block[..., TRADABLE] > 0.5)


def verdict_row(name: str, policy, test, params, seed: int) -> dict:
    """``name``'s verdict on the test window (``report.metrics_document``: one look, seeded), traded as
    a policy (the column ``<name>_rule``: ``linear`` is the name of the baseline column). ``outcome``
    is the verdict's, which tests the alpha over buy-and-hold (``alpha_p_value``, after the looks);
    ``p_value`` is the mean excess's, a figure beside it (rows written before the alpha fields lack
    them)."""
    column = f"{name}_rule"
    result = engine.run_backtest(test, params, {column: policy}, baselines=("buy_and_hold", "equal_weight"))
    doc = report.metrics_document(
        result, window="test", benchmark="buy_and_hold", seed=seed, annualization=TRADING_DAYS_PER_YEAR
    )
    oos = doc.oos_test or OosTest()
    excess = oos.excess.get("buy_and_hold") or ExcessFigures()
    return {
        "outcome": doc.verdict_outcome,
        "p_value": excess.p_value_after_looks,
        "alpha_p_value": excess.alpha_p_value_after_looks,
        "alpha_per_day": excess.alpha_per_day,
        "beta": excess.beta,
        "psr": oos.psr_after_looks,
        "excess_per_day": excess.mean_per_day,
        "sharpe": doc.strategies[column].sharpe_ratio,
        "turnover": doc.strategies[column].turnover,
    }


def run_market(args: argparse.Namespace, level: float, index: int) -> dict:
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
        data_s = time.perf_counter() - start
        result = train_tournament(config, home, run="power", splits=splits)
        train_s = time.perf_counter() - start - data_s
        champion = load_policy(RunDir(home, "power").champion, device="cpu")
        params = to_env_params(config.env)
        test = splits.test
        linear = fit_linear(splits.train, splits.valid, params.decision_interval)
        oracle = Oracle(
            predictor, splits.full.num_steps - test.num_steps, params.decision_interval, test.num_features
        )
        row = {
            "settings_key": settings_key(args),
            "level": level,
            "index": index,
            "seed": seed,
            "shape": row_shape(args, level),
            "oracle_shape": args.shape,
            "strength": spec.strength,
            "test_sessions": len(np.unique(test.session_dates())),
            "env_steps": result.env_steps,
            "pods_tried": result.pods_tried,
            "linear_valid_ic": linear.valid_ic,
            "linear_penalty": linear.penalty,
        }
        for name, policy in (("champion", champion), ("linear", linear), ("oracle", oracle)):
            row[name] = verdict_row(name, policy, test, params, seed)
        row["wall_s"] = round(time.perf_counter() - start, 1)
        row["data_s"], row["tournament_s"] = round(data_s, 1), round(train_s, 1)
        return row
    finally:
        shutil.rmtree(home, ignore_errors=True)


def load_rows(path: Path, key: str, shapes: tuple[str, ...] = ()) -> dict[tuple[float, int], dict]:
    """The rows of ``path`` run with settings ``key`` (and, given ``shapes``, of those shapes: rows
    written before rows had a shape are ``minute_momentum``'s)."""
    if not path.exists():
        return {}
    rows = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            sys.exit(f"error: {path}:{number}: not a power-table row ({exc})")
        if row.get("settings_key") == key and (not shapes or row.get("shape", MINUTE_MOMENTUM) in shapes):
            rows[(float(row["level"]), int(row["index"]))] = row
    return rows


def append_row(path: Path, row: dict) -> None:
    """One market's row, appended in one write and fsynced (a kill loses at most the market running)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(row) + "\n")
        out.flush()
        os.fsync(out.fileno())


def interval(k: int, n: int, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Two-sided Clopper-Pearson interval of a rate ``k / n``."""
    if n == 0:
        return None, None
    a = (1 - confidence) / 2
    low = 0.0 if k == 0 else float(beta_distribution.ppf(a, k, n - k + 1))
    high = 1.0 if k == n else float(beta_distribution.ppf(1 - a, k + 1, n - k))
    return low, high


def upper_95(k: int, n: int) -> float | None:
    """One-sided 95% Clopper-Pearson upper bound."""
    if n == 0:
        return None
    return 1.0 if k == n else float(beta_distribution.ppf(0.95, k + 1, n - k))


def table(rows: list[dict]) -> list[dict]:
    out = []
    for level in sorted({r["level"] for r in rows}):
        mine = [r for r in rows if r["level"] == level]
        for name in STRATEGIES:
            k = sum(r[name]["outcome"] == "significant" for r in mine)
            n = len(mine)
            low, high = interval(k, n)
            out.append(
                {
                    "level": level,
                    "strategy": name,
                    "markets": n,
                    "significant": k,
                    "power": k / n if n else None,
                    "ci95_low": low,
                    "ci95_high": high,
                    "upper_95_one_sided": upper_95(k, n),
                    "median_p": float(
                        np.median([r[name]["p_value"] for r in mine if r[name]["p_value"] is not None])
                    )
                    if any(r[name]["p_value"] is not None for r in mine)
                    else None,
                }
            )
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, spec)


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    key = settings_key(args)
    done = load_rows(args.out, key, (args.shape, "null"))
    if not args.table_only:
        torch.set_num_threads(1)
        for level in args.levels:
            shard, shards = args.shard
            for index in range(args.nulls if level == 0 else args.markets):
                if (float(level), index) in done or index % shards != shard:
                    continue
                row = run_market(args, level, index)
                append_row(args.out, row)
                done[(float(level), index)] = row
                summary = ", ".join(
                    f"{n} {row[n]['outcome']} (p {_fmt(row[n]['p_value'], '.2g')})" for n in STRATEGIES
                )
                print(
                    f"level {level} market {index}: {summary}; {row['wall_s']} s", file=sys.stderr, flush=True
                )
    rows = [r for (level, _), r in sorted(done.items()) if level in {float(x) for x in args.levels}]
    result = table(rows)
    if args.json:
        print(json.dumps({"settings": key, "shape": args.shape, "table": result}, indent=2))
    else:
        print(f"settings: {key}; shape {args.shape}, levels as {'daily IC' if args.ic else 'signal'}")
        print(
            f"{'level':>6} {'strategy':>9} {'markets':>7} {'signif.':>7} {'power':>6}  95% CI         median excess p"
        )
        for r in result:
            ci = f"[{_fmt(r['ci95_low'], '.2f')}, {_fmt(r['ci95_high'], '.2f')}]"
            print(
                f"{r['level']:>6} {r['strategy']:>9} {r['markets']:>7} {r['significant']:>7}"
                f" {_fmt(r['power'], '.2f'):>6}  {ci:<14} {_fmt(r['median_p'], '.2g')}"
            )
    return result


if __name__ == "__main__":
    main()
