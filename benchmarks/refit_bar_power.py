"""How often the direct learner's bars over its start keep a fine-tuning that is truly better.

A fine-tuned direct pod replaces its warm start only if its held-out series beats the start's by
``holdout_margin`` (2) standard errors of the paired per-decision difference (``agents.direct.
clears_start`` on the train window's tail), and a fine-tuned champion stays after the tournament
only if its daily validation returns beat its lineage's start's by the same margin (``agents.
tournament.refit``, ``start_t``: the paired daily difference, days taken as independent). This
simulates both bars' size and power on Gaussian daily returns (seconds of numpy):

- the start's and the fine-tuned book's daily returns have equal volatility and correlation
  ``rho``; the fine-tuned book's true Sharpe ratio is the start's plus ``gain`` (annualized, 252
  days), so the paired difference has a daily Sharpe ratio of ``gain / sqrt(252 * 2 * (1 - rho))``;
- **validation**: the paired t over ``--valid`` days (45: the table's and the demo's validation
  window) must exceed the margin;
- **tail and validation**: the same difference must also clear the margin over ``--tail`` decisions
  of the train window's tail first (14: a fifth of the 72 train sessions, one decision a session as an
  ``open`` pod trades), on other days than the validation window's (the two draws independent); the
  learner looks at the tail every ``holdout_every`` updates and each look is another chance to pass:
  one look is modelled, so the shares are the least the bars keep;
- **size under selection**: with no gain, the champion is the best of ``k`` fine-tuned pods on the
  validation window (the largest mean difference over the common start, pods' noise independent:
  the worst case) and is then judged on that same window, as the refit judges the tournament's pick.

Printed: the share of draws kept per cell. The draws and cells are fixed here before any run: seed
0, 20,000 draws a cell, ``gain`` in 0, 0.5, 1, 2, 4, ``rho`` in 0.5, 0.8, 0.95, ``k`` in 1, 4, 16.

    .venv/bin/python benchmarks/refit_bar_power.py            # under a second
    .venv/bin/python benchmarks/refit_bar_power.py --json
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

ANNUAL = 252
GAINS = (0.0, 0.5, 1.0, 2.0, 4.0)
RHOS = (0.5, 0.8, 0.95)
PICKS = (1, 4, 16)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--valid", type=int, default=45, help="validation days")
    p.add_argument("--tail", type=int, default=14, help="decisions of the train window's held-out tail")
    p.add_argument("--margin", type=float, default=2.0, help="the bar, in standard errors (holdout_margin)")
    p.add_argument("--draws", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def paired_t(diff: np.ndarray) -> np.ndarray:
    """``agents.direct.paired_t`` over the last axis: the mean difference over its standard error
    (sample standard deviation, as torch's ``std``), 0 where the difference is constant."""
    se = diff.std(axis=-1, ddof=1) / math.sqrt(diff.shape[-1])
    return np.where(se > 0, diff.mean(axis=-1) / np.maximum(se, 1e-300), 0.0)


def daily_sharpe_of_difference(gain: float, rho: float) -> float:
    """The paired daily difference's Sharpe ratio for an annualized Sharpe gain at correlation rho."""
    return gain / math.sqrt(ANNUAL * 2.0 * (1.0 - rho))


def kept(rng: np.random.Generator, days: int, sharpe: float, draws: int, margin: float) -> np.ndarray:
    """Of ``draws`` paired differences of ``days`` (unit volatility, mean ``sharpe``): cleared the bar."""
    return paired_t(rng.standard_normal((draws, days)) + sharpe) > margin


def selected_size(rng: np.random.Generator, days: int, k: int, draws: int, margin: float) -> float:
    """No gain; the best of ``k`` pods' differences on the window, judged on the same window."""
    diff = rng.standard_normal((draws, k, days))
    best = diff.mean(axis=-1).argmax(axis=-1)
    chosen = np.take_along_axis(diff, best[:, None, None], axis=1)[:, 0]
    return float((paired_t(chosen) > margin).mean())


def simulate(args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(args.seed)
    power = []
    for rho in RHOS:
        for gain in GAINS:
            s = daily_sharpe_of_difference(gain, rho)
            valid = kept(rng, args.valid, s, args.draws, args.margin)
            tail = kept(rng, args.tail, s, args.draws, args.margin)
            power.append(
                {
                    "rho": rho,
                    "gain": gain,
                    "difference_daily_sharpe": round(s, 4),
                    "valid": float(valid.mean()),
                    "tail_and_valid": float((valid & tail).mean()),
                }
            )
    size = [{"k": k, "valid": selected_size(rng, args.valid, k, args.draws, args.margin)} for k in PICKS]
    settings = {k: getattr(args, k) for k in ("valid", "tail", "margin", "draws", "seed")}
    return {"settings": settings, "power": power, "size_selected": size}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    result = simulate(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return result
    print(
        f"bar {args.margin:g} SE; validation {args.valid} days, tail {args.tail} decisions; "
        f"{args.draws:,} draws a cell, seed {args.seed}"
    )
    print(f"{'rho':>5} {'gain':>5} {'diff SR/day':>11} {'validation':>10} {'tail+valid':>10}")
    for row in result["power"]:
        print(
            f"{row['rho']:>5} {row['gain']:>5} {row['difference_daily_sharpe']:>11.4f} "
            f"{row['valid']:>10.3f} {row['tail_and_valid']:>10.3f}"
        )
    print("no gain, the best of k pods judged on the window that chose it:")
    for row in result["size_selected"]:
        print(f"  k = {row['k']:>2}: kept {row['valid']:.3f}")
    return result


if __name__ == "__main__":
    main()
