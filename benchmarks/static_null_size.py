"""How often the verdict calls a static book significant on the power table's null markets.

A champion that learned nothing often holds a near-fixed book (turnover of a few percent a day)
while buy-and-hold's weights drift. Holding fixed weights is not buy-and-hold: it rebalances back to
its weights, and in a market of log-normal prices a rebalanced book can earn a "rebalancing premium"
over a drifting one. If that premium were large enough at the verdict's window, a null market would
not be null for such a book, and the verdict's rate of significant results on nulls would exceed its
5% level for any policy that barely trades.

This benchmark measures it without training: on each null market of the power table
(``benchmarks/power_table.py``'s markets at ``signal=0``: ``--tickers`` tickers, ``--sessions``
sessions, the same splits and the default costs), a policy that targets equal weights over the
tradable assets at every decision is backtested on the held-out test window through the env, and
its verdict is stated as the report states it (``backtests.report.metrics_document``: the alpha over
buy-and-hold at the 5% level, one look, seeded). It prints the rate of significant verdicts with its
one-sided 95% Clopper-Pearson upper bound, the distribution of the alpha's p-values and the mean
daily alpha with its standard error across markets (zero before costs if rebalancing earns nothing).

    .venv/bin/python benchmarks/static_null_size.py                          # 64 markets from seed 5000
    .venv/bin/python benchmarks/static_null_size.py --first-seed 90000 --markets 16 --out rows.jsonl

Each market takes about 10 s on one CPU thread (most of it the market's generation).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from app.config import to_env_params  # noqa: E402
from backtests import engine, report  # noqa: E402
from backtests.metrics_model import ExcessFigures, OosTest  # noqa: E402
from envs.observation import TRADABLE, split_obs  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import power_table  # noqa: E402

from backtests.metrics import TRADING_DAYS_PER_YEAR


class EqualWeight:
    """Target equal weights over the decision bar's tradable assets, every decision."""

    def __init__(self, num_assets: int, num_features: int) -> None:
        self.num_assets, self.num_features = num_assets, num_features

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        _, block = split_obs(obs, self.num_assets, self.num_features)
        tradable = (block[..., TRADABLE] > 0.5).to(torch.float32)
        return tradable / tradable.sum(dim=-1, keepdim=True).clamp(min=1.0)


def run_market(args: argparse.Namespace, seed: int) -> dict:
    start = time.perf_counter()
    config = power_table.config_of(args, seed, 0.0)
    test = power_table.market_splits(config, seed).test
    policy = EqualWeight(test.num_assets, test.num_features)
    result = engine.run_backtest(
        test, to_env_params(config.env), {"static_rule": policy}, baselines=("buy_and_hold", "equal_weight")
    )
    doc = report.metrics_document(
        result, window="test", benchmark="buy_and_hold", seed=seed, annualization=TRADING_DAYS_PER_YEAR
    )
    excess = (doc.oos_test or OosTest()).excess.get("buy_and_hold") or ExcessFigures()
    return {
        "seed": seed,
        "outcome": doc.verdict_outcome,
        "alpha_p_value": excess.alpha_p_value_after_looks,
        "alpha_per_day": excess.alpha_per_day,
        "beta": excess.beta,
        "turnover": doc.strategies["static_rule"].turnover,
        "wall_s": round(time.perf_counter() - start, 1),
    }


def summary(rows: list[dict]) -> dict:
    p = np.array([r["alpha_p_value"] for r in rows], dtype=float)
    alpha = np.array([r["alpha_per_day"] for r in rows], dtype=float)
    k, n = sum(r["outcome"] == "significant" for r in rows), len(rows)
    return {
        "markets": n,
        "significant": k,
        "rate": k / n,
        "upper_95_one_sided": power_table.upper_95(k, n),
        "alpha_p_below": {str(x): int((p < x).sum()) for x in (0.05, 0.1, 0.25, 0.5)},
        "median_alpha_p_value": float(np.median(p)),
        "mean_alpha_per_day": float(alpha.mean()),
        "mean_alpha_standard_error": float(alpha.std(ddof=1) / np.sqrt(n)),
        "median_turnover": float(np.median([r["turnover"] for r in rows])),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markets", type=int, default=64)
    p.add_argument("--first-seed", type=int, default=5000, help="the power table's null seeds start at 5000")
    p.add_argument("--out", type=Path, default=None, help="also append each market's row here (JSON lines)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    table_args = power_table.parse_args([])
    torch.set_num_threads(1)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.markets):
        row = run_market(table_args, seed)
        rows.append(row)
        if args.out is not None:
            power_table.append_row(args.out, row)
        print(
            f"seed {seed}: {row['outcome']} (alpha {100 * row['alpha_per_day']:+.4f}%/day, "
            f"p {row['alpha_p_value']:.3f}); {row['wall_s']} s",
            file=sys.stderr,
            flush=True,
        )
    result = summary(rows)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['significant']} of {result['markets']} significant (one-sided 95% bound "
            f"{result['upper_95_one_sided']:.3f}); alpha p below 0.05/0.1/0.25/0.5: "
            f"{'/'.join(str(v) for v in result['alpha_p_below'].values())}; median alpha p "
            f"{result['median_alpha_p_value']:.2f}; mean alpha {100 * result['mean_alpha_per_day']:+.4f}%/day "
            f"(se {100 * result['mean_alpha_standard_error']:.4f}); median turnover "
            f"{result['median_turnover']:.3f}/day"
        )
    return result


if __name__ == "__main__":
    main()
