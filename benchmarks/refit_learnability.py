"""What refitting after selection adds at the open: the same models fitted on more of the past.

A design study for the direct learner, not a power figure of the product (the markets, rows and
trading of ``benchmarks/open_learnability.py``: each session's first decision, the target the return
from the fill to the session's close, each score traded once a day at the env's default cost). The
learner's start today fits on the train window's first 80% and uses the last 20% to choose (the
ridge's penalty, the network's epochs) and to judge; the baselines fit on the whole train window and
choose on the validation window. Three ways to fit the same two models are compared on the test
window:

- ``train80``: fitted on the first 80% of the train window's rows, the penalty or epoch count chosen
  on the last 20% (the learner's start today);
- ``train``: the same choice, then refitted on the whole train window at the chosen penalty or epoch
  count (the tail's rows join the fit once they have chosen);
- ``train_valid``: the same recipe on the train and validation windows together (chosen on the last
  20% of their rows, then refitted on all of them): what a refit after the tournament's selection
  could use, the test window still never read.

Models: ``ridge`` (penalty among ``backtests.linear.PENALTIES`` by the held-out rank IC) and
``network`` (a one-hidden-layer network of 32 units, the mean of three seeds, its epochs chosen by the
held-out rank IC every 5 epochs). Printed per cell: markets whose daily net excess over equal weight is
significant (one-sided t-test at 5%), the median excess and turnover and the mean test rank IC, per
model and way (``open_learnability.summary``).

Markets: ``open_learnability``'s (seeds ``1,200,000 + 1000 * round(1000 * ic) + market``, 8 a cell,
``daily_cross_section`` and ``nonlinear`` at IC 0.05 and 0.10), fixed before the first run; they were
read by that study's design, so this is a comparison of fits, not evidence of power.

    .venv/bin/python benchmarks/refit_learnability.py --json     # about 25 minutes on one core
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from open_learnability import HOLDOUT, open_rows, run_study, study_market, traded  # noqa: E402

from agents.direct import cost_per_turnover  # noqa: E402
from backtests.linear import PENALTIES  # noqa: E402
from data.planted_ic import rank_ic  # noqa: E402
from envs.params import EnvParams  # noqa: E402

WAYS = ("train80", "train", "train_valid")
MODELS = ("ridge", "network")
SEEDS_PER_NETWORK = 3
CHECK_EVERY = 5


def _ic(scores: np.ndarray, y: np.ndarray) -> float:
    return float(np.nanmean(rank_ic(scores, y)))


def ridge_fits(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(coef of the first 80% at the penalty the last 20% chose, coef of all rows at it)``."""
    cut = int(len(x) * (1 - HOLDOUT))

    def solve(rows: slice, penalty: float) -> np.ndarray:
        flat, fy = x[rows].reshape(-1, x.shape[-1]), y[rows].reshape(-1)
        gram = flat.T @ flat
        return np.linalg.solve(gram + penalty * np.trace(gram) / len(gram) * np.eye(len(gram)), flat.T @ fy)

    scored = [(_ic(x[cut:] @ solve(slice(0, cut), p), y[cut:]), p) for p in PENALTIES]
    penalty = max(scored)[1]
    return solve(slice(0, cut), penalty), solve(slice(0, len(x)), penalty)


def _network(x: np.ndarray, y: np.ndarray, seed: int, epochs: int, held=None, hidden: int = 32):
    """A network trained ``epochs`` full-batch epochs on ``(x, y)``; with ``held`` the epoch count
    (a multiple of 5) whose held-out rank IC was best, else ``epochs``; returns (score fn, count)."""
    flat = x.reshape(-1, x.shape[-1])
    mu, sd = flat.mean(axis=0), flat.std(axis=0) + 1e-9
    as_t = lambda a: torch.tensor((a - mu) / sd, dtype=torch.float32)  # noqa: E731
    features, targets = as_t(x), torch.tensor(y, dtype=torch.float32)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(x.shape[-1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
    )
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-3)
    best, state, count, stale = -math.inf, None, epochs, 0
    for epoch in range(1, epochs + 1):
        opt.zero_grad()
        ((net(features).squeeze(-1) - targets) ** 2).mean().backward()
        opt.step()
        if held is not None and epoch % CHECK_EVERY == 0:
            with torch.no_grad():
                ic = _ic(net(as_t(held[0])).squeeze(-1).numpy(), held[1])
            if ic > best:
                best, state, count, stale = ic, {k: v.clone() for k, v in net.state_dict().items()}, epoch, 0
            elif (stale := stale + 1) > 10:
                break
    if state is not None:
        net.load_state_dict(state)
    return (lambda z: net(as_t(z)).squeeze(-1).detach().numpy()), count


def network_fits(x: np.ndarray, y: np.ndarray, seed: int, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scores of ``z``: ``(the 80% fits early-stopped on the last 20%, all rows at those epochs)``,
    each the mean of :data:`SEEDS_PER_NETWORK` seeds."""
    cut = int(len(x) * (1 - HOLDOUT))
    part, full = [], []
    for k in range(SEEDS_PER_NETWORK):
        fn, count = _network(x[:cut], y[:cut], seed + k, 400, held=(x[cut:], y[cut:]))
        part.append(fn(z))
        full.append(_network(x, y, seed + k, count)[0](z))
    return np.mean(part, axis=0), np.mean(full, axis=0)


def market_row(shape: str, level: float, index: int) -> dict:
    start = time.perf_counter()
    seed, splits, predictor, (x, y), (x_test, oracle, y_test, hold) = study_market(shape, level, index)
    interval = EnvParams().decision_interval
    xv, _, yv, _ = open_rows(splits.valid, predictor, splits.train.num_steps, interval)
    both_x, both_y = np.concatenate([x, xv]), np.concatenate([y, yv])
    ridge80, ridge_train = ridge_fits(x, y)
    ridge_both = ridge_fits(both_x, both_y)[1]
    net80, net_train = network_fits(x, y, seed, x_test)
    net_both = network_fits(both_x, both_y, seed, x_test)[1]
    scores = {
        "oracle": oracle,
        "ridge/train80": x_test @ ridge80,
        "ridge/train": x_test @ ridge_train,
        "ridge/train_valid": x_test @ ridge_both,
        "network/train80": net80,
        "network/train": net_train,
        "network/train_valid": net_both,
    }
    cost = sum(cost_per_turnover(EnvParams())) / 2
    row = {"shape": shape, "level": level, "index": index, "seed": seed, "sessions": [len(x), len(xv)]}
    for name, s in scores.items():
        row[name] = traded(s, hold, cost) | {"ic": round(_ic(s, y_test), 4)}
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


def main(argv: list[str] | None = None) -> dict:
    names = ("oracle", *(f"{m}/{w}" for m in MODELS for w in WAYS))
    return run_study(__doc__, market_row, names, argv)


if __name__ == "__main__":
    main()
