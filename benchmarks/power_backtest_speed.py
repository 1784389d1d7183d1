"""The power table's backtest stage: its columns in one batched backtest against one backtest a
column (the way the table ran its three columns before), on one market, with the verdicts compared.

It builds one market as ``benchmarks/power_table.py`` does (``--shape``, ``--ic``, ``--tickers``,
the plan's 243 sessions split 72 / 45 / 126), fits the ridge and the boosted ranker once, and times
the seven columns that need no tournament (``start``, both ways of the ridge, of the boosted ranker
and of the planted predictor) judged (a) from one ``run_backtest`` call with all of them beside
buy-and-hold and equal weight (``power_columns.verdicts``), (b) from one call per column, each with
the two benchmarks. It checks that every column's verdict row is the same both ways.

    .venv/bin/python benchmarks/power_backtest_speed.py --shape daily_cross_section --ic 0.05 --seed 970000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from app.config import to_env_params, to_learner_args  # noqa: E402
from backtests.boosted import fit_boosted  # noqa: E402
from backtests.linear import fit_linear  # noqa: E402
from benchmarks import power_table  # noqa: E402
from benchmarks.power_columns import column_policies, verdicts  # noqa: E402
from data.planted import SHAPES  # noqa: E402
from data.synthetic import SyntheticSpec, planted_predictor  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="daily_cross_section", choices=SHAPES)
    p.add_argument("--ic", type=float, default=0.05)
    p.add_argument("--tickers", type=int, default=40)
    p.add_argument("--seed", type=int, default=970_000)
    args = p.parse_args(argv)
    table_args = power_table.parse_args(
        ["--shape", args.shape, "--ic", str(args.ic), "--tickers", str(args.tickers), "--sessions", "243"]
        + ["--train-frac", str(72 / 243), "--valid-frac", str(45 / 243)]
    )
    torch.set_num_threads(1)
    config = power_table.config_of(table_args, args.seed, args.ic)
    splits = power_table.market_splits(config, args.seed)
    data = config.data
    predictor = planted_predictor(
        SyntheticSpec(
            num_tickers=data.num_tickers,
            num_sessions=data.num_sessions,
            seed=args.seed,
            signal=data.signal,
            shape=data.shape,
            target_ic=data.target_ic,
        )
    )
    params, learner = to_env_params(config.env), to_learner_args(config)
    fitted = {
        "linear": fit_linear(splits.train, splits.valid, params.decision_interval),
        "boosted": fit_boosted(splits.train, splits.valid, params.decision_interval),
    }

    def policies() -> dict:  # fresh ones each time: the planted predictor's columns count their calls
        return column_policies(splits, params, learner, fitted, predictor)

    start = time.perf_counter()
    batched = verdicts(splits.test, params, policies(), args.seed)
    batched_s = time.perf_counter() - start
    separate, each = {}, {}
    for name, policy in policies().items():
        start = time.perf_counter()
        separate.update(verdicts(splits.test, params, {name: policy}, args.seed))
        each[name] = round(time.perf_counter() - start, 1)
    separate_s = sum(each.values())
    out = {
        "columns": len(batched),
        "batched_s": round(batched_s, 1),
        "separate_s": round(separate_s, 1),
        "separate_each_s": each,
        "same_verdicts": batched == separate,
    }
    print(out)
    return out


if __name__ == "__main__":
    main()
