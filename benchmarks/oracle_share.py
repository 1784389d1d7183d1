"""How much of the planted predictor's test IC the linear learners reach, with and without ``zret``.

For each of ``--markets`` planted markets of the power table's size (100 tickers x 243 sessions split
72 / 45 / 126, the ``library`` features), at the decisions of the 15-minute grid: the planted
predictor's mean cross-sectional IC with the next interval's returns on the test window (the
oracle's), and as shares of it the test IC of

- ``ridge``: the ridge baseline (``backtests.linear.fit_linear``: penalty on validation, refitted on
  train and validation);
- ``start``: the direct learner's linear start (``agents.linear_start.fit_linear_start`` with its
  blend, its bagged screen and the learner's default top mass and horizon) on the train and validation decisions
  joined, their last fifth held out for the penalty: the start as the refit fits it;
- ``best_alone``: the feature whose test IC is highest, signed by its train IC (a hindsight choice:
  how far one column of the set goes, not a learner),

each on the whole set (``_30``) and on the set without the four ``zret`` columns (``_26``), in the same
process on the same markets. Not a power figure: an IC share says how much of the edge a score
carries, before the trading rule and costs. Seeds from ``--first-seed`` (default 1,200,000: the
learner's development seeds, outside every power table's).

    .venv/bin/python benchmarks/oracle_share.py --shape daily_cross_section --ic 0.05 --markets 6
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from agents.args import DirectArgs  # noqa: E402
from agents.direct import decisions_of  # noqa: E402
from agents.linear_start import fit_linear_start  # noqa: E402
from backtests.linear import decision_panel, fit_linear, information_coefficient  # noqa: E402
from data.loader import synthetic_market  # noqa: E402
from data.planted import SHAPES  # noqa: E402
from data.synthetic import SyntheticSpec, planted_predictor  # noqa: E402

SPLIT = dict(num_tickers=100, num_sessions=243, train_frac=72 / 243, valid_frac=45 / 243)
INTERVAL = 15
WITHOUT_ZRET = 26  # the set's columns before the four zret ones


def first_columns(market, count: int):
    """``market`` with its first ``count`` feature columns only."""
    return dataclasses.replace(
        market, features=market.features[..., :count].contiguous(), feature_names=market.feature_names[:count]
    )


def shares(train, valid, test, oracle: torch.Tensor) -> dict[str, float]:
    """The ridge's, the start's and the best single column's test IC over the oracle's."""
    panel = decision_panel(test, INTERVAL)
    o = information_coefficient(oracle, panel)
    ridge = fit_linear(train, valid, INTERVAL)
    joined = decisions_of(train.join(valid), INTERVAL)
    defaults = DirectArgs()
    fit_rows = joined.num - max(1, round(joined.num * defaults.holdout_frac))
    start = fit_linear_start(
        joined, fit_rows, defaults.top_mass, blend=True, screen_draws=defaults.start_screen_draws
    )
    fit = decision_panel(train, INTERVAL)
    alone = []
    for j in range(panel.x.shape[-1]):
        sign = 1.0 if information_coefficient(fit.x[..., j], fit) >= 0 else -1.0
        alone.append(sign * information_coefficient(panel.x[..., j], panel))
    start_ic = 0.0 if start.is_zero else information_coefficient(panel.x @ start.coef.double(), panel)
    return {
        "ridge": information_coefficient(panel.x @ ridge.coef.double(), panel) / o,
        "start": start_ic / o,
        "best_alone": max(alone) / o,
        "best_alone_name": test.feature_names[max(range(len(alone)), key=alone.__getitem__)],
    }


def market_row(shape: str, ic: float, seed: int) -> dict:
    start = time.perf_counter()
    splits = synthetic_market(seed=seed, shape=shape, target_ic=ic, feature_set="library", **SPLIT)
    spec = SyntheticSpec(num_tickers=100, num_sessions=243, seed=seed, shape=shape, target_ic=ic)
    predictor = planted_predictor(spec)
    offset = splits.full.num_steps - splits.test.num_steps
    bars = torch.arange(0, splits.test.num_steps - INTERVAL, INTERVAL)
    oracle = torch.nan_to_num(torch.as_tensor(predictor[offset + bars.numpy()], dtype=torch.float64))
    row: dict = {
        "seed": seed,
        "oracle_ic": round(information_coefficient(oracle, decision_panel(splits.test, INTERVAL)), 4),
    }
    windows = (splits.train, splits.valid, splits.test)
    for count in (WITHOUT_ZRET, windows[0].num_features):
        for key, value in shares(*(first_columns(w, count) for w in windows), oracle).items():
            row[f"{key}_{count}"] = round(value, 3) if isinstance(value, float) else value
    row["s"] = round(time.perf_counter() - start, 1)
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="daily_cross_section", choices=SHAPES)
    p.add_argument("--ic", type=float, default=0.05, help="the planted daily rank IC")
    p.add_argument("--markets", type=int, default=6)
    p.add_argument("--first-seed", type=int, default=1_200_000)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.markets):
        rows.append(market_row(args.shape, args.ic, seed))
        print(json.dumps(rows[-1]), flush=True)
    keys = [k for k, v in rows[0].items() if isinstance(v, float) and k not in ("oracle_ic", "s")]
    means = {k: round(statistics.mean(r[k] for r in rows), 3) for k in keys}
    whole = [k for k in keys if not k.endswith(f"_{WITHOUT_ZRET}")]
    better = {k: sum(r[k] > r[k.rsplit("_", 1)[0] + f"_{WITHOUT_ZRET}"] for r in rows) for k in whole}
    print(
        json.dumps(
            {"shape": args.shape, "ic": args.ic, "markets": len(rows), "mean": means, "above_26": better}
        )
    )
    return rows


if __name__ == "__main__":
    main()
