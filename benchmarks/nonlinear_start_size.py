"""The size of the nonlinear start's keep rule: how often, on markets with nothing planted, a candidate
beats the ridge by the rule that keeps it.

The open pods' start (``agents.nonlinear_start``) keeps a candidate (the member networks, or with
``start_products`` the screened pair's quadratic) only if its per-row information coefficients, out
of fold on the fit rows and then on the train window's held-out tail, beat the ridge's on the same
rows by ``MARGIN`` (one) standard error of the paired difference. Were those rows untouched by the
candidate's choices, a one-sided one-standard-error bar would pass about 16% of null markets. The
networks' epochs are chosen by the best mean out-of-fold IC on the very rows that then judge them,
which can raise that rate; the pair is screened and fitted inside each fold, which should not. This
script counts, on null markets (the power table's size and features, ``nonlinear`` shape at IC 0),
for each candidate:

- ``network``: the rule as shipped (out-of-fold ICs at the epoch chosen on all folds);
- ``network_crossfit``: the same fits judged at each fold's epoch chosen on the other folds' curves
  only (the choice left out of the rows it judges; partly: those folds' networks were trained on rows
  that include the judged block, which a nested cross-validation would not);
- ``pair``: the pair candidate (``start_products``), screened and fitted in each fold.

It is a property of the rule, not a power figure: no tournament, no trading. The count and seeds
were fixed before the first run: 24 null markets, seeds 2,200,000-2,200,023 (outside every power
table's and design study's), the open pod's default settings (``DIRECT_KINDS``'s ``open``, seed 0).
With ``--ic`` the same count on planted ``nonlinear`` markets gives each rule's rate of keeping a
candidate where there is an interaction to find (the rule's power, beside its size); those runs'
seeds and counts are fixed in docs/benchmarks.md before they run.

    .venv/bin/python benchmarks/nonlinear_start_size.py --markets 24
    .venv/bin/python benchmarks/nonlinear_start_size.py --ic 0.10 --markets 12 --first-seed 2210000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from scipy.stats import binomtest  # noqa: E402

from agents import nonlinear_start as ns  # noqa: E402
from agents.args import DirectArgs  # noqa: E402
from agents.direct import decisions_of, start_from_linear  # noqa: E402
from agents.linear_start import start_panels  # noqa: E402
from agents.networks import NetworkConfig  # noqa: E402
from agents.policy import Policy  # noqa: E402
from agents.tournament.pod import learner_args  # noqa: E402
from agents.tournament.search_space import DIRECT_KINDS  # noqa: E402
from benchmarks.start_blend import design_market, market_rows  # noqa: E402

FIRST_SEED = 2_200_000
INTERVAL = 15
CANDIDATES = ("network", "network_crossfit", "pair")


def one_market(seed: int, ic: float = 0.0) -> dict:
    splits, _ = design_market("nonlinear", ic, seed)
    open_kind = dict(DIRECT_KINDS)["open"]
    args = learner_args(DirectArgs, {**open_kind, "seed": 0}, splits.train, INTERVAL)
    d = decisions_of(splits.train, INTERVAL)
    fit_rows = d.num - max(1, int(round(d.num * args.holdout_frac)))
    policy = Policy(
        NetworkConfig(
            d.features.shape[1],
            d.features.shape[2],
            asset_layers=1,
            linear_skip=True,
            embed=args.embed,
            demean_features=args.demean_features,
        )
    )
    # the open pod's start up to its nonlinear part: the ridge, the observation statistics, the skip
    ridge = start_from_linear(policy, d, fit_rows, dataclasses.replace(args, nonlinear_start=False))
    fit, tail, _ = start_panels(d, fit_rows, args.start_horizon, args.trade_window)
    folds = ns.fold_ridges(fit, ridge)
    base = ns.ridge_rows(fit, tail, ridge, folds)
    fitting = {"epochs": 300, "lr": 3e-3, "wd": 1e-3}
    # the shipped network candidate, and the same fold curves for the cross-fitted judgement
    curves = ns.fold_curves(policy, fit, folds, args.seed, fitting)
    network, network_rows = ns._network_candidate(policy, fit, tail, ridge, curves, args.seed, fitting)
    tail_rows = network_rows[-tail.x.shape[0] :]
    crossfit = torch.cat([ns.crossfit_rows(curves), tail_rows])
    _, pair_rows = ns._product_candidate(policy, fit, tail, ridge, folds)
    out = {"seed": seed, "fit_rows": int(fit.x.shape[0]), "tail_rows": int(tail.x.shape[0])}
    for name, rows in (("network", network_rows), ("network_crossfit", crossfit), ("pair", pair_rows)):
        diff = rows - base
        se = float(diff.std()) / math.sqrt(diff.numel())
        out[f"{name}_t"] = round(float(diff.mean()) / se, 2) if se > 0 else 0.0
        out[f"{name}_kept"] = ns.beats(rows, base)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markets", type=int, default=24, help="markets (seeds from 2,200,000)")
    p.add_argument("--ic", type=float, default=0.0, help="the planted interaction's daily rank IC (0: null)")
    p.add_argument("--first-seed", type=int, default=FIRST_SEED)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    seeds = range(args.first_seed, args.first_seed + args.markets)
    rows = market_rows(seeds, lambda seed: one_market(seed, args.ic))
    out = {"ic": args.ic, "markets": len(rows), "first_seed": args.first_seed}
    for name in CANDIDATES:
        kept = sum(r[f"{name}_kept"] for r in rows)
        out[name] = {
            "kept": kept,
            "rate": round(kept / len(rows), 3),
            "p_vs_16pct": round(float(binomtest(kept, len(rows), 0.1587, alternative="greater").pvalue), 4),
        }
    print(json.dumps(out, indent=2) if args.json else out)
    return out


if __name__ == "__main__":
    main()
