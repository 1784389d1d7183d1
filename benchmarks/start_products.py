"""A screen of pairwise feature products beside the open pods' linear start: how well each ranks the
test window at the open, as a share of the planted predictor's information coefficient.

A design study for the learner's nonlinear side, not a power figure: it isolates a start's fit from
trading, selection and costs. The tournament's ``open`` pods trade at each session's first decision
and hold to the next session's (``agents.tournament.search_space.DIRECT_KINDS``); their start is the
default linear start fitted on those rows (``agents.linear_start.fit_linear_start`` with the open
trade window: each row's target the return held to the next trade), plus a small network
(``agents.nonlinear_start``) kept only on a clear out-of-fold gain. An interaction of two inputs
(the planted ``nonlinear`` shape: the previous session's last hour times the rest of that session)
is one product of two standardized features, which a linear score cannot use and a 16-unit network
must approximate from a few dozen sessions.

For each seed, one market of the power table's size (100 tickers x 243 sessions split 72 / 45 / 126,
the library's features) of the planted ``--shape`` at daily IC ``--ic`` is built. On the train window
(what a pod's start reads) and on the train and validation windows joined (what the refit reads),
at the open pods' rows:

- ``start``: the product's linear start for an open pod (the default share and screen);
- ``product``: the single product ``z_i * z_j`` (``i <= j``: squares included) of the features
  standardized across names in each row (``z``) whose per-row correlation with the target has the
  largest ``|t|`` over the fit rows (``agents.linear_start``'s screen, over products instead of
  features), signed by its fit; its ``t`` recorded as ``product_t``;
- ``start_plus_product``: the two scores standardized across names and added;
- ``pair_squares``: the screened pair's product and the two features' squares (each standardized
  across names), weighted by their pooled least-squares fit to the target (a screened pair's product
  may hold a square beside the interaction: ``ret_390`` is the last hour plus the rest of the session);
- ``top3``: the three products of the largest ``|t|``, each standardized and signed by its fit, added;
- ``pair_bagged``: ``pair_squares`` with the pair's screen bagged as the linear start's feature screen
  is (``agents.linear_start.screen_weights``): the screen run on 64 bootstrap resamples of the fit
  rows (seeded by :data:`BAG_SEED`), each pair picked weighted by its share of the draws, its product
  and two squares fitted on all fit rows and its score standardized across names.

Each is scored on the test window's open rows (target: the return held to the next open) by its mean
cross-sectional information coefficient, divided by the planted predictor's on the same rows (the
zero model counts 0). Seeds from 2,100,000, outside every power table's and design study's.

    .venv/bin/python benchmarks/start_products.py --shape nonlinear --ic 0.05 --seeds 8
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from agents.args import DirectArgs  # noqa: E402
from agents.direct import decisions_of  # noqa: E402
from agents.linear_start import (  # noqa: E402
    _best_by_t,
    _row_correlations,
    fit_linear_start,
    screen_weights,
    start_panels,
)
from agents.tournament.pod import open_window  # noqa: E402
from backtests.linear import DecisionRows, demean, information_coefficient  # noqa: E402
from benchmarks.start_blend import design_market, market_rows  # noqa: E402
from data.planted import SHAPES  # noqa: E402

FIRST_SEED = 2_100_000
INTERVAL = 15
VARIANTS = ("start", "product", "start_plus_product", "pair_squares", "top3", "pair_bagged")
#: Bootstrap draws of the bagged pair screen and their seed.
BAG_DRAWS = 64
BAG_SEED = 20261201


def standardized(x: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """``x (R, A, F)`` demeaned and scaled across the valid names of each row (0 elsewhere, and where a
    column has no spread in a row)."""
    z = demean(x, ok)
    n = ok.sum(dim=1, keepdim=True).clamp(min=1).unsqueeze(-1)
    sd = (z.square().sum(dim=1, keepdim=True) / n).sqrt()
    return torch.where(sd > 0, z / sd.clamp(min=1e-300), torch.zeros_like(z))


def pairs(num_features: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(num_features) for j in range(i, num_features)]


def product_scores(x: torch.Tensor, ok: torch.Tensor, pair: tuple[int, int]) -> torch.Tensor:
    z = standardized(x, ok)
    return z[..., pair[0]] * z[..., pair[1]]


def product_panel(panel: DecisionRows) -> tuple[DecisionRows, list[tuple[int, int]]]:
    """The panel's every pair's product of standardized features as its columns, and the pairs."""
    z = standardized(panel.x, panel.ok)
    every = pairs(z.shape[-1])
    i = torch.tensor([p[0] for p in every])
    j = torch.tensor([p[1] for p in every])
    return DecisionRows(x=z[..., i] * z[..., j], y=panel.y, ok=panel.ok), every


def screened_product(panel: DecisionRows) -> tuple[tuple[int, int], float, float]:
    """The pair whose product best ranks the panel's targets (largest ``|t|`` of the per-row
    correlations), the sign of its mean correlation and its ``t``."""
    prods, every = product_panel(panel)
    corr = _row_correlations(prods)
    best = _best_by_t(corr)
    mean = float(corr[:, best].mean())
    se = float(corr[:, best].std()) / math.sqrt(corr.shape[0])
    return every[best], math.copysign(1.0, mean), mean / se if se > 0 else 0.0


def top_products(panel: DecisionRows, k: int) -> list[tuple[tuple[int, int], float]]:
    """The ``k`` pairs of the largest ``|t|`` (each with the sign of its mean correlation)."""
    prods, every = product_panel(panel)
    corr = _row_correlations(prods)
    t = corr.mean(dim=0) / (corr.std(dim=0) / math.sqrt(corr.shape[0])).clamp(min=1e-300)
    best = t.abs().argsort(descending=True)[:k].tolist()
    return [(every[b], math.copysign(1.0, float(t[b]))) for b in best]


def bagged_pairs(panel: DecisionRows, draws: int = BAG_DRAWS) -> dict[tuple[int, int], float]:
    """Each pair screened (largest ``|t|`` of its product's per-row correlations) on at least one of
    ``draws`` bootstrap resamples of the panel's rows, with its share of the draws: the linear start's
    bagged screen (``agents.linear_start.screen_weights``) over the products."""
    products, every = product_panel(panel)
    weights = screen_weights(products, draws, seed=BAG_SEED)
    return {every[k]: float(weights[k]) for k in torch.nonzero(weights).squeeze(-1).tolist()}


def _pair_columns(x: torch.Tensor, ok: torch.Tensor, pair: tuple[int, int]) -> torch.Tensor:
    z = standardized(x, ok)
    i, j = pair
    return standardized(torch.stack([z[..., i] * z[..., j], z[..., i].square(), z[..., j].square()], -1), ok)


def pair_with_squares(panel: DecisionRows, pair: tuple[int, int]) -> torch.Tensor:
    """``(3,)``: the least-squares weights of the pair's product and its two squares (each
    standardized across names) on the panel's targets (demeaned across names), pooled over rows."""
    cols = _pair_columns(panel.x, panel.ok, pair)
    y = demean(panel.y, panel.ok)
    return torch.linalg.lstsq(cols[panel.ok], y[panel.ok].unsqueeze(-1)).solution.squeeze(-1)


def _one_column(scores: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """``scores (R, A)`` standardized across the valid names of each row."""
    return standardized(scores.unsqueeze(-1), ok)[..., 0]


def pair_squares_scores(test: DecisionRows, fit: DecisionRows, pair: tuple[int, int]) -> torch.Tensor:
    """The pair's product and two squares on ``test``, weighted by their least-squares fit on ``fit``."""
    return _pair_columns(test.x.to(torch.float64), test.ok, pair) @ pair_with_squares(fit, pair)


def _ic(scores: torch.Tensor, panel: DecisionRows) -> float:
    ic = information_coefficient(scores.to(torch.float64), panel)
    return ic if math.isfinite(ic) else 0.0


def one_market(shape: str, target_ic: float, seed: int) -> dict:
    splits, predictor = design_market(shape, target_ic, seed)
    window = open_window(splits.train.time_of_day, INTERVAL)
    d_test = decisions_of(splits.test, INTERVAL)
    test, _, test_rows = start_panels(d_test, d_test.num, window=window)
    offset = splits.full.num_steps - splits.test.num_steps
    bars = offset + test_rows.cpu().numpy() * INTERVAL
    oracle = torch.nan_to_num(torch.as_tensor(predictor[bars], dtype=torch.float64))
    oracle_ic = _ic(oracle, test)
    row: dict = {"seed": seed, "oracle_ic": round(oracle_ic, 5), "test_rows": int(test.y.shape[0])}
    args = DirectArgs()
    for name, market in (("train", splits.train), ("joined", splits.train.join(splits.valid))):
        d = decisions_of(market, INTERVAL)
        fit_rows = d.num - max(1, int(round(d.num * args.holdout_frac)))
        start = fit_linear_start(
            d,
            fit_rows,
            args.top_mass,
            window=window,
            blend=args.start_blend,
            screen_draws=args.start_screen_draws,
            single_share=args.start_single_share,
        )
        fit, _, _ = start_panels(d, fit_rows, window=window)
        pair, sign, t = screened_product(fit)
        s_start = test.x.to(torch.float64) @ start.coef.to(torch.float64)
        s_product = sign * product_scores(test.x.to(torch.float64), test.ok, pair)
        both = standardized(torch.stack([s_start, s_product], dim=-1), test.ok).sum(dim=-1)
        s_squares = pair_squares_scores(test, fit, pair)
        s_top3 = sum(
            sign * _one_column(product_scores(test.x.to(torch.float64), test.ok, p), test.ok)
            for p, sign in top_products(fit, 3)
        )
        bagged = bagged_pairs(fit)
        s_bagged = sum(
            share * _one_column(pair_squares_scores(test, fit, p), test.ok) for p, share in bagged.items()
        )
        variants = (
            ("start", s_start),
            ("product", s_product),
            ("start_plus_product", both),
            ("pair_squares", s_squares),
            ("top3", s_top3),
            ("pair_bagged", s_bagged),
        )
        for variant, scores in variants:
            row[f"{name}_{variant}"] = round(_ic(scores, test) / oracle_ic, 3) if oracle_ic else 0.0
        row[f"{name}_pair"] = [market.feature_names[pair[0]], market.feature_names[pair[1]]]
        row[f"{name}_product_t"] = round(t, 2)
        top = max(bagged, key=bagged.get)
        row[f"{name}_bagged_top"] = [
            market.feature_names[top[0]],
            market.feature_names[top[1]],
            round(bagged[top], 2),
        ]
    return row


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="nonlinear", choices=SHAPES)
    p.add_argument("--ic", type=float, default=0.05, help="the planted predictor's daily rank IC")
    p.add_argument("--seeds", type=int, default=8, help="markets (seeds from 2,100,000)")
    p.add_argument("--first-seed", type=int, default=FIRST_SEED)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    rows = market_rows(seeds, lambda seed: one_market(args.shape, args.ic, seed))
    keys = [f"{w}_{v}" for w in ("train", "joined") for v in VARIANTS]
    out = {
        "shape": args.shape,
        "ic": args.ic,
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "mean_share": {k: round(sum(r[k] for r in rows) / len(rows), 3) for k in keys},
        "median_product_t": {
            w: sorted(r[f"{w}_product_t"] for r in rows)[len(rows) // 2] for w in ("train", "joined")
        },
    }
    print(json.dumps(out, indent=2) if args.json else out)
    return out


if __name__ == "__main__":
    main()
