"""The linear start with and without its blend: how well each ranks the test window, as a share of
the planted predictor's information coefficient.

For each seed, one market of the power table's size (100 tickers x 243 sessions split 72 / 45 / 126,
the library's features: 30 now, 26 when the blend was studied) of the planted ``--shape`` at daily IC ``--ic`` is built. On the train
window (what a pod's start reads) and on the train and validation windows joined (what the refit
reads), the direct learner's start is fitted as the product fits it (``agents.linear_start.
fit_linear_start``: next-interval target at 15-minute decisions, the last 20% of the window held
out to choose the penalty) three ways: the ridge alone (``ridge``), the ridge blended with the
screened feature at the ridge's own penalty (``blend``, the default: ``start_path``), and the blend
whose penalty its own held-out tail chooses (``blend_own_penalty``, the variant not taken). Printed
per seed and as means: each start's mean cross-sectional information coefficient with the
next-interval returns on the test window divided by the planted predictor's (the zero model
counts 0).

``blend`` picks its single feature by the plain screen (the largest ``|t|`` of the fit rows' per-row
correlations, ``agents.linear_start.screened_feature``: ``start_screen_draws = 0``). With
``--screens``, three other ways of choosing it: ``blend_bagged``, the product's default (the screen
bagged over ``DirectArgs.start_screen_draws`` resamples of the fit rows,
``agents.linear_start.screen_weights``); ``blend_screen_joined``, the plain screen of the fit and
held-out rows together (more rows for the noisiest step); ``blend_screen_sessions``, the fit rows
with the correlations first averaged over blocks of a session's decisions (a standard error that
allows for a slow feature's correlation persisting through a session). The last two were studied
and not taken (docs/benchmarks.md, "The start's screen").

With ``--single-shares W ...``, the product's bagged blend (``blend_bagged``) beside the same start
with the single-feature side's share of the blend moved from one half to ``W``
(``blend_bagged_W``, ``DirectArgs.start_single_share = W``: the ridge's scores times ``1 - W`` plus
the bagged single-feature model's, at the ridge's spread, times ``W``; 1: the single-feature model
alone, the ridge still choosing the penalty and the zero model).

Not a power figure: it isolates the start's fit from trading, selection and costs. Seeds 1,200,000
onwards, outside the power tables'.

    .venv/bin/python benchmarks/start_blend.py --shape minute_momentum --ic 0.05 --seeds 12
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import agents.linear_start as linear_start  # noqa: E402
from agents.args import DirectArgs  # noqa: E402
from agents.direct import decisions_of  # noqa: E402
from agents.linear_start import fit_linear_start, start_panels, start_path  # noqa: E402
from backtests.linear import (  # noqa: E402
    PENALTIES,
    DecisionRows,
    decision_panel,
    information_coefficient,
    join_panels,
)
from data.loader import synthetic_market  # noqa: E402
from data.planted import SHAPES  # noqa: E402
from data.synthetic import SyntheticSpec, planted_predictor  # noqa: E402

FIRST_SEED = 1_200_000
SPLIT = dict(num_tickers=100, num_sessions=243, train_frac=72 / 243, valid_frac=45 / 243)
INTERVAL = 15
HOLDOUT_FRAC = 0.2
VARIANTS = ("ridge", "blend", "blend_own_penalty")
SCREENS = ("blend_bagged", "blend_screen_joined", "blend_screen_sessions")
BAGGED_DRAWS = DirectArgs().start_screen_draws
SESSION_DECISIONS = 390 // INTERVAL  # a full session's 15-minute decisions


def _session_screen(panel: DecisionRows) -> int:
    """The screen with each feature's per-row correlations averaged over blocks of
    :data:`SESSION_DECISIONS` consecutive rows before the ``|t|`` (block means, then their t)."""
    corr = linear_start._row_correlations(panel)  # (the screen's own per-row correlations)
    blocks = corr.shape[0] // SESSION_DECISIONS
    if blocks < 2:
        return linear_start.screened_feature(panel)
    means = corr[: blocks * SESSION_DECISIONS].reshape(blocks, SESSION_DECISIONS, -1).mean(dim=1)
    t = means.mean(dim=0) / (means.std(dim=0) / math.sqrt(blocks)).clamp(min=1e-300)
    return int(t.abs().argmax())


def _screened_blend(d, fit_rows: int, variant: str) -> torch.Tensor:
    """The blend with its single feature chosen another way (``SCREENS``)."""
    if variant == "blend_bagged":
        return fit_linear_start(d, fit_rows, 0.5, blend=True, screen_draws=BAGGED_DRAWS).coef
    if variant == "blend_screen_joined":
        fit, tail, _ = start_panels(d, fit_rows)
        plain = linear_start.screened_feature
        screen = lambda panel: plain(join_panels(panel, tail))  # noqa: E731
    else:
        screen = _session_screen

    def one_pick(panel: DecisionRows, draws: int) -> torch.Tensor:
        weights = torch.zeros(panel.x.shape[-1], dtype=torch.float64)
        weights[screen(panel)] = 1.0
        return weights

    with mock.patch.object(linear_start, "screen_weights", one_pick):
        return fit_linear_start(d, fit_rows, 0.5, blend=True).coef


def _single_share_blend(d, fit_rows: int, share: float) -> torch.Tensor:
    """The bagged blend with the single-feature side's share ``share`` instead of one half."""
    return fit_linear_start(d, fit_rows, 0.5, blend=True, screen_draws=BAGGED_DRAWS, single_share=share).coef


def _own_penalty_blend(d, fit_rows: int) -> torch.Tensor:
    """The blend whose penalty the held-out tail chooses by the blend's own information coefficient
    (the zero model when none is positive)."""
    fit, tail, _ = start_panels(d, fit_rows)
    best = None
    for coef in start_path(fit, PENALTIES, True):
        ic = information_coefficient(tail.x @ coef, tail)
        if ic == ic and ic > 0.0 and (best is None or ic > best[0]):
            best = (ic, coef)
    return torch.zeros(d.features.shape[-1], dtype=torch.float64) if best is None else best[1]


def _share(coef: torch.Tensor, test: DecisionRows, oracle_ic: float) -> float:
    ic = information_coefficient(test.x @ coef.to(torch.float64), test)
    return 0.0 if not math.isfinite(ic) else ic / oracle_ic


def market_rows(seeds: range, one: Callable[[int], dict]) -> list[dict]:
    """``one(seed)`` of each design market, each row printed to stderr with its seconds as it ends."""
    rows = []
    for seed in seeds:
        start = time.perf_counter()
        rows.append(one(seed))
        print(
            json.dumps({**rows[-1], "s": round(time.perf_counter() - start, 1)}), file=sys.stderr, flush=True
        )
    return rows


def design_market(shape: str, target_ic: float, seed: int):
    """A design study's market (the power table's size, the library's features) and its planted
    predictor, bar for bar."""
    splits = synthetic_market(seed=seed, shape=shape, target_ic=target_ic, feature_set="library", **SPLIT)
    spec = SyntheticSpec(
        num_tickers=SPLIT["num_tickers"],
        num_sessions=SPLIT["num_sessions"],
        seed=seed,
        shape=shape,
        target_ic=target_ic,
    )
    return splits, planted_predictor(spec)


def one_market(
    shape: str, target_ic: float, seed: int, screens: bool = False, single_shares: tuple[float, ...] = ()
) -> dict:
    splits, predictor = design_market(shape, target_ic, seed)
    test = decision_panel(splits.test, INTERVAL)
    offset = splits.full.num_steps - splits.test.num_steps
    bars = torch.arange(0, splits.test.num_steps - INTERVAL, INTERVAL)
    oracle = torch.nan_to_num(torch.as_tensor(predictor[offset + bars.numpy()], dtype=torch.float64))
    oracle_ic = information_coefficient(oracle, test)
    row: dict = {"seed": seed, "oracle_ic": round(oracle_ic, 5)}
    for window, market in (("train", splits.train), ("joined", splits.train.join(splits.valid))):
        d = decisions_of(market, INTERVAL)
        fit_rows = d.num - max(1, int(round(d.num * HOLDOUT_FRAC)))
        starts: dict[str, torch.Tensor] = {
            "ridge": fit_linear_start(d, fit_rows, 0.5, blend=False).coef,
            "blend": fit_linear_start(d, fit_rows, 0.5, blend=True).coef,
            "blend_own_penalty": _own_penalty_blend(d, fit_rows),
        }
        for variant in SCREENS if screens else ():
            starts[variant] = _screened_blend(d, fit_rows, variant)
        if single_shares and "blend_bagged" not in starts:
            starts["blend_bagged"] = _screened_blend(d, fit_rows, "blend_bagged")
        for share in single_shares:
            starts[f"blend_bagged_{share:g}"] = _single_share_blend(d, fit_rows, share)
        for name, coef in starts.items():
            row[f"{window}_{name}"] = round(_share(coef, test, oracle_ic), 3)
    return row


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="minute_momentum", choices=SHAPES)
    p.add_argument("--ic", type=float, default=0.05, help="the planted predictor's daily rank IC")
    p.add_argument("--seeds", type=int, default=12, help="markets (seeds from 1,200,000)")
    p.add_argument("--screens", action="store_true", help="add the two other screens (SCREENS)")
    p.add_argument(
        "--single-shares",
        type=float,
        nargs="*",
        default=[],
        help="the bagged blend's single-feature share arms",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if any(not 0.0 <= w <= 1.0 for w in args.single_shares):
        p.error("--single-shares: each share between 0 and 1")
    torch.set_num_threads(1)
    shares_arg = tuple(args.single_shares)
    rows = market_rows(
        range(FIRST_SEED, FIRST_SEED + args.seeds),
        lambda seed: one_market(args.shape, args.ic, seed, args.screens, shares_arg),
    )
    shares = tuple(f"blend_bagged_{w:g}" for w in args.single_shares)
    variants = VARIANTS + (SCREENS if args.screens else ("blend_bagged",) if shares else ()) + shares
    keys = [f"{w}_{v}" for w in ("train", "joined") for v in variants]
    means = {k: round(sum(r[k] for r in rows) / len(rows), 3) for k in keys}
    wins = {w: sum(r[f"{w}_blend"] > r[f"{w}_ridge"] for r in rows) for w in ("train", "joined")}
    out = {
        "shape": args.shape,
        "ic": args.ic,
        "seeds": args.seeds,
        "mean_share": means,
        "blend_beats_ridge": wins,
    }
    if args.screens:
        out["screen_beats_blend"] = {
            f"{w}_{v}": sum(r[f"{w}_{v}"] > r[f"{w}_blend"] for r in rows)
            for w in ("train", "joined")
            for v in SCREENS
        }
    if shares:
        out["share_vs_bagged"] = {
            f"{w}_{v}": [
                sum(r[f"{w}_{v}"] > r[f"{w}_blend_bagged"] for r in rows),
                sum(r[f"{w}_{v}"] < r[f"{w}_blend_bagged"] for r in rows),
            ]
            for w in ("train", "joined")
            for v in shares
        }
    print(json.dumps(out, indent=2) if args.json else out)
    return out


if __name__ == "__main__":
    main()
