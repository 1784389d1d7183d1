"""What the direct learner's fine-tuning gains on the test window over its own start, with no bar.

A design study for the learner, not a power figure of the product. On each market (the power table's
settings: the library's features, 100 tickers x 243 sessions split 72 / 45 / 126, the default
``[agent]`` settings), for each direct pod kind (``agents.tournament.search_space.DIRECT_KINDS``:
``intraday`` and ``open``) one fresh pod is trained by ``agents.direct.train`` as a tournament's
round trains one (its start, the same as ``agents.tournament.refit.start_of`` makes, then the
gradient) for ``--steps`` env-steps with ``holdout_margin = 0`` (the best held-out look is kept whenever it beats
the start's at all: no bar, no tournament, no selection among pods, no refit). Both are backtested on
the test window in one batched backtest (``benchmarks.power_columns.verdicts``). Printed per cell and
kind: the markets where the fine-tuning moved the policy (weights or config), the test Sharpe ratio's change over the
start (mean, median, the paired t across markets), and the markets where the fine-tuned pod's test
Sharpe is the higher. What it answers: whether the gradient adds anything a longer or cleaner judge
could keep (``benchmarks/refit_bar_power.py``: the bars cannot see gains under about +2 Sharpe).

Markets and counts fixed here before any run: the shapes ``nonlinear`` at IC 0.10,
``minute_momentum`` and ``daily_cross_section`` at IC 0.05, 8 markets each, seeds
``2,800,000 + 1000 * round(1000 * IC) + market`` (outside every table), 100,000 env-steps, pod seed
0, two processes with one intra-op thread each.

    .venv/bin/python benchmarks/finetune_gain.py --json --out docs/figures/finetune_gain.jsonl

Averaged fine-tuning (``--set average_weights=true``: each held-out look judges the running mean of
the start and the iterates, ``agents.direct``), plan fixed here before its first market: first on
the markets above, which choose (their starts are the plain run's, so the rows pair market by
market); then, whatever those show, on fresh markets, ``--first-seed 3300000`` (seeds 3,350,000-
3,350,007 and 3,400,000-3,400,007, outside every table), 8 markets a cell, the plain fine-tuning
and the averaged one, both run once. The averaged fine-tuning beats its start if, on the fresh
markets' pod-markets where it moved the weights, its test Sharpe is the higher on enough of them
for a one-sided sign test at 5%; only then is it tried in the power table.

    .venv/bin/python benchmarks/finetune_gain.py --json --set average_weights=true \
        --out docs/figures/finetune_gain_averaged.jsonl
    .venv/bin/python benchmarks/finetune_gain.py --json --first-seed 3300000 \
        --out docs/figures/finetune_gain_fresh.jsonl
    .venv/bin/python benchmarks/finetune_gain.py --json --first-seed 3300000 --set average_weights=true \
        --out docs/figures/finetune_gain_fresh_averaged.jsonl

The skip's fine-tuning (``--set finetune=skip``: the gradient moves the linear skip alone, the start's
linear score re-weighted for the traded objective; ``agents.direct``), plan fixed here before its
first market, the same design: the choosing markets above, then the fresh ones (``--first-seed
3300000``, the plain rows of the averaged study's fresh run as its comparison), each run once, the
same rule.

    .venv/bin/python benchmarks/finetune_gain.py --json --set finetune=skip \
        --out docs/figures/finetune_gain_skip.jsonl
    .venv/bin/python benchmarks/finetune_gain.py --json --first-seed 3300000 --set finetune=skip \
        --out docs/figures/finetune_gain_fresh_skip.jsonl

The skip's `intraday` pods on the `nonlinear` shape, the one cell-kind that leaned up in both runs
above (a reading after the fact), tested on its own, plan fixed here before its first market: 16
fresh `nonlinear` markets at IC 0.10, ``--first-seed 3600000`` (seeds 3,700,000-3,700,015, outside
every table), run once; the skip's fine-tuning beats its start on this cell if its `intraday` pods'
test Sharpe is the higher on enough of the markets where they moved for a one-sided sign test at 5%
(the `open` pods' rows are read out beside, not tested).

    .venv/bin/python benchmarks/finetune_gain.py --json --first-seed 3600000 --markets 16 \
        --cells "nonlinear 0.10" --set finetune=skip --out docs/figures/finetune_gain_skip_nonlinear.jsonl

The trading rule's fine-tuning (``--set finetune=rule``: the gradient moves two numbers, the logits'
scale and the rebalance rate, the network fixed; ``agents.direct``), plan fixed here before its
first market: first the study's own markets above (exploratory: they decide nothing), then,
whatever those show, 24 fresh markets, ``--first-seed 4400000`` (seeds 4,450,000-4,450,007 for the
two linear shapes at IC 0.05 and 4,500,000-4,500,007 for ``nonlinear`` at IC 0.10, outside every
table), each run once, the same rule as above: it beats its start if, on the fresh markets'
pod-markets where it moved the policy (its weights or its rebalance rate), its test Sharpe is the
higher on enough of them for a one-sided sign test at 5%; only then is it tried in the power table.

    .venv/bin/python benchmarks/finetune_gain.py --json --set finetune=rule \
        --out docs/figures/finetune_gain_rule.jsonl
    .venv/bin/python benchmarks/finetune_gain.py --json --first-seed 4400000 --set finetune=rule \
        --out docs/figures/finetune_gain_fresh_rule.jsonl

The trading rule climbing the net return's own Sharpe ratio (``--set finetune=rule --set
objective=sharpe``: the test's own measure; on the study's markets the rule climbing the default's
active objective, the selection's return alone, traded less and lowered the test Sharpe while its
verdicts held), plan fixed here before its first market, the same design and rule: the study's markets (exploratory), then 24 fresh
markets, ``--first-seed 4600000`` (seeds 4,650,000-4,650,007 and 4,700,000-4,700,007, outside every
table), each run once.

    .venv/bin/python benchmarks/finetune_gain.py --json --set finetune=rule --set objective=sharpe \
        --out docs/figures/finetune_gain_rule_sharpe.jsonl
    .venv/bin/python benchmarks/finetune_gain.py --json --first-seed 4600000 --set finetune=rule \
        --set objective=sharpe --out docs/figures/finetune_gain_fresh_rule_sharpe.jsonl

The fine-tuning on data the start did not see (``--tune-on valid``: the train window's start, the
same as above, fine-tuned by the plain gradient on the validation window, its last fifth the
looks' tail; at the start the gradient of the train window's fit rows points where the ridge's
penalty held it back from their noise, on rows it never saw it points at its errors), plan fixed
here before its first market, the same design and rule: the study's markets (exploratory), then 24
fresh markets, ``--first-seed 4800000`` (seeds 4,850,000-4,850,007 and 4,900,000-4,900,007, outside
every table), each run once.

    .venv/bin/python benchmarks/finetune_gain.py --json --tune-on valid \
        --out docs/figures/finetune_gain_valid.jsonl
    .venv/bin/python benchmarks/finetune_gain.py --json --first-seed 4800000 --tune-on valid \
        --out docs/figures/finetune_gain_fresh_valid.jsonl

The whole book's Sharpe ratio with cash buying no safety (``--set objective=invested_sharpe``: the
net return with the book's cash share earning equal weight's return; the rule on the active
objective shrank the selection, which that objective's Sharpe ratio does not see, and on the net
return's own Sharpe ratio it sold the market, which this objective does not pay for), two
candidates, plan fixed here before either's first market, in this order: the trading rule climbing
it (``--set finetune=rule``), then every weight climbing it; for each, the study's markets
(exploratory), then 24 fresh markets (the rule: ``--first-seed 5000000``, seeds 5,050,000-5,050,007
and 5,100,000-5,100,007; every weight: ``--first-seed 5200000``, seeds 5,250,000-5,250,007 and
5,300,000-5,300,007; all outside every table), each run once, the same rule as above: it beats its
start if, on the fresh pod-markets where it moved the policy, its test Sharpe is the higher on
enough of them for a one-sided sign test at 5%. A run not finished at the session's end is
reported as not finished and counted in no figure.

    .venv/bin/python benchmarks/finetune_gain.py --json --set finetune=rule --set objective=invested_sharpe \
        --out docs/figures/finetune_gain_rule_invested.jsonl
    .venv/bin/python benchmarks/finetune_gain.py --json --first-seed 5000000 --set finetune=rule \
        --set objective=invested_sharpe --out docs/figures/finetune_gain_fresh_rule_invested.jsonl
    .venv/bin/python benchmarks/finetune_gain.py --json --set objective=invested_sharpe \
        --out docs/figures/finetune_gain_invested.jsonl
    .venv/bin/python benchmarks/finetune_gain.py --json --first-seed 5200000 --set objective=invested_sharpe \
        --out docs/figures/finetune_gain_fresh_invested.jsonl

    .venv/bin/python benchmarks/finetune_gain.py --markets 1 --steps 2000 --cells "minute_momentum 0.05"
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from agents import direct  # noqa: E402
from agents.args import DirectArgs  # noqa: E402
from agents.tournament.pod import learner_args  # noqa: E402
from agents.tournament.refit import same_policy, start_of  # noqa: E402
from agents.tournament.search_space import DIRECT_KINDS  # noqa: E402
from app.config import to_env_params, to_learner_args  # noqa: E402
from benchmarks import power_table  # noqa: E402
from benchmarks.gpu_figures import TABLE_FLAGS  # noqa: E402
from benchmarks.null_books import p_at_least  # noqa: E402
from benchmarks.power_columns import verdicts  # noqa: E402
from benchmarks.power_paired import read_rows  # noqa: E402

CELLS = ("nonlinear 0.10", "minute_momentum 0.05", "daily_cross_section 0.05")
#: What a row keeps of each policy's test verdict (``benchmarks.power_columns.verdict_of``).
ROW_FIGURES = ("sharpe", "outcome", "alpha_per_day", "beta", "turnover", "costs")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", nargs="+", default=list(CELLS), help='"shape IC" pairs')
    p.add_argument("--markets", type=int, default=8, help="markets a cell")
    p.add_argument("--steps", type=int, default=100_000, help="env-steps of each fine-tuning")
    p.add_argument("--first-seed", type=int, default=2_800_000)
    p.add_argument("--jobs", type=int, default=2, help="processes (one intra-op thread each)")
    p.add_argument(
        "--set",
        dest="overrides",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="DirectArgs settings of the fine-tuned pods, e.g. average_weights=true (values as JSON)",
    )
    p.add_argument(
        "--tune-on",
        choices=TUNE_ON,
        default="train",
        help="the window the start's fine-tuning runs on: the train window the start was fitted on, or "
        "the validation window it never saw (the start is the train window's either way)",
    )
    p.add_argument("--out", type=Path, default=None, help="write each market's row (JSON lines)")
    p.add_argument("--rows", type=Path, default=None, help="read out an earlier run's rows, run nothing")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        args.cells = [(shape, float(ic)) for shape, ic in (cell.split() for cell in args.cells)]
    except ValueError:
        p.error('--cells: "shape IC" pairs, e.g. "nonlinear 0.10"')
    try:
        args.overrides = dict(overrides(args.overrides))
    except ValueError as err:
        p.error(f"--set: {err}")
    return args


#: The windows a fine-tuning may run on (``--tune-on``).
TUNE_ON = ("train", "valid")
#: What the study fixes for every pod (its budget, seed and no bar): ``--set`` may not change them.
FIXED = ("seed", "total_steps", "holdout_margin")


def overrides(items: list[str]) -> list[tuple[str, object]]:
    """``KEY=VALUE`` pairs of ``DirectArgs`` fields, each value of its field's default's type: JSON
    (``true``, ``0.001``) for booleans and numbers, the text itself for strings."""
    defaults = {f.name: f.default for f in dataclasses.fields(DirectArgs)}
    out = []
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or key not in defaults:
            raise ValueError(f"{item!r} is not KEY=VALUE of a DirectArgs field")
        if key in FIXED:
            raise ValueError(f"{key} is fixed by the study (--steps sets the budget)")
        default = defaults[key]
        if isinstance(default, str):
            out.append((key, text))
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        kind = bool if isinstance(default, bool) else (int, float)
        if isinstance(value, bool) != isinstance(default, bool) or not isinstance(value, kind):
            raise ValueError(f"{key}={text!r}: expected a {type(default).__name__} as JSON")
        out.append((key, value))
    return out


def table_args(shape: str, ic: float, first_seed: int) -> argparse.Namespace:
    """The power table's settings for the markets of one cell."""
    return power_table.parse_args(
        [*TABLE_FLAGS, "--shape", shape, "--ic", str(ic), "--first-seed", str(first_seed)]
    )


def run_market(task: tuple[str, float, int, int, int, dict]) -> dict:
    """One market's row: per kind, the start's and the fine-tuned pod's test verdicts."""
    shape, ic, index, first_seed, steps, settings, tune_on = task
    torch.set_num_threads(1)
    begin = time.perf_counter()
    table = table_args(shape, ic, first_seed)
    seed = power_table.market_seed(table, ic, index)
    config = power_table.config_of(table, seed, ic)
    splits = power_table.market_splits(config, seed)
    params = to_env_params(config.env)
    interval = int(params.decision_interval)
    base = dataclasses.asdict(to_learner_args(config))
    tuning = splits.train if tune_on == "train" else splits.valid
    env = SimpleNamespace(
        market=tuning,
        params=params,
        num_assets=tuning.num_assets,
        num_features=tuning.num_features,
        device=tuning.device,
    )
    policies, moved = {}, {}
    for kind, hparams in DIRECT_KINDS:
        raw = {**base, **hparams, "seed": 0, "total_steps": steps, "holdout_margin": 0.0, **settings}
        args = learner_args(DirectArgs, raw, splits.train, interval)
        start = start_of(splits.train, params, args)
        if tune_on == "train":  # a fresh pod, as a tournament's round trains one (the same start)
            tuned = direct.train(args, env).policy
        else:  # the train window's start, fine-tuned on the validation window
            tuned = direct.train(args, env, init=copy.deepcopy(start)).policy
        tuned.eval()
        policies[f"{kind}_start"], policies[f"{kind}_tuned"] = start, tuned
        moved[kind] = not same_policy(start, tuned)
    judged = verdicts(splits.test, params, policies, seed)
    row = {"shape": shape, "ic": ic, "index": index, "seed": seed, "steps": steps, "moved": moved}
    if settings:
        row["settings"] = settings
    if tune_on != "train":
        row["tune_on"] = tune_on
    row.update({name: {k: judged[name][k] for k in ROW_FIGURES} for name in policies})
    for name, policy in policies.items():  # (what a "rule" fine-tuning moves besides the weights)
        row[name]["rebalance_rate"] = policy.config.rebalance_rate
    row["wall_s"] = round(time.perf_counter() - begin, 1)
    return row


def gain(row: dict, kind: str) -> float:
    """The fine-tuned pod's test Sharpe ratio less its start's on one market."""
    return row[f"{kind}_tuned"]["sharpe"] - row[f"{kind}_start"]["sharpe"]


def summary(rows: list[dict]) -> list[dict]:
    """Per cell and kind: moved, the test Sharpe's change over the start and where it is higher."""
    out = []
    for shape, ic in sorted({(r["shape"], r["ic"]) for r in rows}):
        cell = [r for r in rows if (r["shape"], r["ic"]) == (shape, ic)]
        for kind, _ in DIRECT_KINDS:
            gains = [gain(r, kind) for r in cell]
            sd = statistics.stdev(gains) if len(gains) > 1 else float("nan")
            t = statistics.mean(gains) / (sd / math.sqrt(len(gains))) if sd and sd > 0 else float("nan")
            out.append(
                {
                    "shape": shape,
                    "ic": ic,
                    "kind": kind,
                    "markets": len(cell),
                    "moved": sum(r["moved"][kind] for r in cell),
                    "mean_gain": statistics.mean(gains),
                    "median_gain": statistics.median(gains),
                    "t": t,
                    "tuned_higher": sum(g > 0 for g in gains),
                    "tuned_lower": sum(g < 0 for g in gains),
                }
            )
    return out


def sign_test(higher: int, lower: int) -> float:
    """One-sided sign test: the chance of ``higher`` or more of ``higher + lower`` fair coin flips
    coming up higher (ties are left out before)."""
    return p_at_least(higher, higher + lower, 0.5)


def pooled(rows: list[dict]) -> dict:
    """Every cell and kind together: the pod-markets where the fine-tuning moved the policy, those
    where its test Sharpe is the higher and the lower (a Sharpe ratio that is not a number, counted
    apart as ``undefined``), and the one-sided sign test of the study's rule (the fine-tuning beats
    its start at 5%)."""
    gains = [gain(r, kind) for r in rows for kind, _ in DIRECT_KINDS if r["moved"][kind]]
    higher, lower = sum(g > 0 for g in gains), sum(g < 0 for g in gains)
    return {
        "moved": len(gains),
        "higher": higher,
        "lower": lower,
        "undefined": sum(math.isnan(g) for g in gains),
        "sign_p": sign_test(higher, lower),
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.rows is not None:
        return report(args, read_rows(args.rows, "finetune_gain --rows"))
    if args.out is not None and args.out.exists():
        sys.exit(f"error: {args.out} exists (the study writes fresh rows)")
    tasks = [
        (s, ic, i, args.first_seed, args.steps, args.overrides, args.tune_on)
        for s, ic in args.cells
        for i in range(args.markets)
    ]
    if args.jobs > 1:
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            rows = pool.map(run_market, tasks, chunksize=1)
    else:
        rows = [run_market(t) for t in tasks]
    if args.out is not None:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return report(args, rows)


def report(args: argparse.Namespace, rows: list[dict]) -> dict:
    """Print and return the read-out of ``rows``."""
    if args.rows is not None:  # the rows' own settings, not this command line's defaults
        settings = {
            "rows": str(args.rows),
            "markets": len(rows),
            "steps": sorted({r["steps"] for r in rows}),
            "seeds": [min(r["seed"] for r in rows), max(r["seed"] for r in rows)] if rows else [],
            "overrides": sorted({json.dumps(r.get("settings", {}), sort_keys=True) for r in rows}),
            "tune_on": sorted({r.get("tune_on", "train") for r in rows}),
        }
    else:
        settings = {k: str(v) for k, v in vars(args).items()}
    result = {
        "settings": settings,
        "summary": summary(rows),
        "pooled": pooled(rows),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return result
    for s in result["summary"]:
        print(
            f"{s['shape']:>20} {s['ic']:<5} {s['kind']:>8}: moved {s['moved']}/{s['markets']}, test Sharpe "
            f"gain mean {s['mean_gain']:+.2f} median {s['median_gain']:+.2f} (t {s['t']:.2f}), higher on "
            f"{s['tuned_higher']}, lower on {s['tuned_lower']}"
        )
    all_ = result["pooled"]
    print(
        f"pooled: moved on {all_['moved']} pod-markets, higher on {all_['higher']}, lower on "
        f"{all_['lower']} (one-sided sign test p {all_['sign_p']:.3f})"
    )
    return result


if __name__ == "__main__":
    main()
