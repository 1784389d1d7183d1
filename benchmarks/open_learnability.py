"""What a model fitted to returns finds of each daily planted shape when it trades once a day, at the open.

A design study for the direct learner, not a power figure of the product: it sizes a schedule and a
model class before they are built into pods. On each market (the power table's size: 100 tickers x
243 sessions split 72 / 45 / 126, the ``library`` features, the env's default 15-minute decision grid),
only the **first decision of each session** is used: the features at the session's first bar, and as
the target each name's return from the fill (the next bar's open) to the session's close, demeaned
and scaled across names. Three score models are fitted on the train window's first decisions, the last
20% of them held out for early stopping (the validation window is not read):

- ``ridge``: a ridge of the features (penalty chosen by the held-out rank IC);
- ``lightgbm``: a LightGBM regressor, early-stopped on the held-out rows;
- ``mlp``: a one-hidden-layer network (32 units) on standardized features, trained full-batch on the
  squared error and early-stopped on the held-out rank IC; the mean of three seeds' scores.

The ``oracle`` is the planted predictor itself. Each score is traded on the test window as the
champion trades (a softmax whose temperature puts half the book on the top 20%), but **once a day**:
full rebalance at the first decision's fill, held to the next session's; each unit of traded weight
pays the env's default cost (``agents.direct.cost_per_turnover``). Printed per model: how many markets'
daily net excess over equal weight is significant (one-sided t-test at 5%: daily rebalancing leaves
the excess nearly serially uncorrelated; the product's verdict uses its own alpha test), the median
excess and turnover, and the mean test rank IC with the realized target.

Seeds ``1,200,000 + 1000 * round(1000 * ic) + market`` (outside the power table's and every other
benchmark's); 8 markets a cell, shapes ``daily_cross_section`` and ``nonlinear`` at IC 0.05 and 0.10:
fixed before the first run.

    .venv/bin/python benchmarks/open_learnability.py            # about 25 minutes on one core
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lightgbm as lgb  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy import stats  # noqa: E402
from shape_visibility import planted_market, window_rows  # noqa: E402

from agents.direct import cost_per_turnover  # noqa: E402
from backtests.linear import PENALTIES, TOP_FRACTION  # noqa: E402
from data.planted import DAILY_SHAPES  # noqa: E402
from data.planted_ic import rank_ic  # noqa: E402
from envs.params import EnvParams  # noqa: E402

FIRST_SEED = 1_200_000
MARKETS = 8
LEVELS = (0.05, 0.10)
HOLDOUT = 0.2
MODELS = ("oracle", "ridge", "lightgbm", "mlp")


def scaled(x: np.ndarray) -> np.ndarray:
    """Each row (one decision, across names) divided by its standard deviation (0 without spread)."""
    sd = x.std(axis=-1, keepdims=True)
    return np.divide(x, sd, out=np.zeros_like(x), where=sd > 0)


def open_rows(market, predictor: np.ndarray, offset: int, interval: int):
    """At each session's first decision: features ``(S, A, F)`` (demeaned across names), the planted
    predictor ``(S, A)``, the target (fill to the session's close, demeaned) and the return from this
    session's fill to the next one's ``(S - 1, A)``."""
    x, y, position = window_rows(market, predictor, offset, interval)
    first = np.flatnonzero(position == 0)
    bars = first * interval
    sid, close, opn = market.session_id.numpy(), market.close.numpy(), market.open.numpy()
    last = np.searchsorted(sid, sid[bars], side="right") - 1
    target = close[last] / opn[bars + 1] - 1.0
    hold = opn[bars[1:] + 1] / opn[bars[:-1] + 1] - 1.0
    return x[first], y[first], scaled(target - target.mean(axis=1, keepdims=True)), hold


def fit_ridge(x, y, xv, yv):
    flat, fy = x.reshape(-1, x.shape[-1]), y.reshape(-1)
    gram = flat.T @ flat
    scale = np.trace(gram) / len(gram)
    best = None
    for penalty in PENALTIES:
        coef = np.linalg.solve(gram + penalty * scale * np.eye(len(gram)), flat.T @ fy)
        ic = float(np.nanmean(rank_ic(xv @ coef, yv)))
        if best is None or ic > best[0]:
            best = (ic, coef)
    coef = best[1]
    return lambda z: z @ coef


def fit_lightgbm(x, y, xv, yv, seed):
    model = lgb.LGBMRegressor(
        n_estimators=500, learning_rate=0.03, num_leaves=15, min_child_samples=100, subsample=0.7,
        subsample_freq=1, colsample_bytree=0.8, random_state=seed, n_jobs=1, verbose=-1,
    )  # fmt: skip
    flat = lambda a: a.reshape(-1, a.shape[-1])  # noqa: E731
    model.fit(flat(x), y.reshape(-1), eval_set=[(flat(xv), yv.reshape(-1))],
              callbacks=[lgb.early_stopping(50, verbose=False)])  # fmt: skip
    return lambda z: model.predict(flat(z)).reshape(z.shape[:-1])


def fit_mlp(x, y, xv, yv, seed, hidden=32, epochs=400):
    flat = x.reshape(-1, x.shape[-1])
    mu, sd = flat.mean(axis=0), flat.std(axis=0) + 1e-9
    as_t = lambda a: torch.tensor((a - mu) / sd, dtype=torch.float32)  # noqa: E731
    features, targets, held = as_t(x), torch.tensor(y, dtype=torch.float32), as_t(xv)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(x.shape[-1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
    )
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-3)
    best, state, stale = -math.inf, None, 0
    for epoch in range(epochs):
        opt.zero_grad()
        ((net(features).squeeze(-1) - targets) ** 2).mean().backward()
        opt.step()
        if epoch % 5 == 0:
            with torch.no_grad():
                ic = float(np.nanmean(rank_ic(net(held).squeeze(-1).numpy(), yv)))
            if ic > best:
                best, state, stale = ic, {k: v.clone() for k, v in net.state_dict().items()}, 0
            elif (stale := stale + 1) > 10:
                break
    net.load_state_dict(state)
    return lambda z: net(as_t(z)).squeeze(-1).detach().numpy()


def softmax_top(scores: np.ndarray, top_mass: float = 0.5) -> np.ndarray:
    """Softmax weights of each row whose temperature puts ``top_mass`` of the book, on average, on the
    top ``TOP_FRACTION`` of names (bisection on the log temperature)."""
    z = scaled(scores - scores.mean(axis=1, keepdims=True))
    top = max(1, int(TOP_FRACTION * scores.shape[1]))
    lo, hi = -8.0, 8.0
    for _ in range(50):
        mid = (lo + hi) / 2
        w = np.exp(math.exp(mid) * (z - z.max(axis=1, keepdims=True)))
        w /= w.sum(axis=1, keepdims=True)
        lo, hi = (mid, hi) if np.sort(w, axis=1)[:, -top:].sum(axis=1).mean() < top_mass else (lo, mid)
    return w


def traded(scores: np.ndarray, hold: np.ndarray, cost: float) -> dict:
    """The once-a-day book's net daily excess over equal weight on ``hold (S - 1, A)``."""
    w = softmax_top(scores)[:-1]
    start = np.vstack([np.full(w.shape[1], 1.0 / w.shape[1]), w[:-1]])
    turnover = np.abs(w - start).sum(axis=1)
    excess = (w * hold).sum(axis=1) - hold.mean(axis=1) - cost * turnover
    t = excess.mean() / (excess.std(ddof=1) / math.sqrt(len(excess)))
    return {
        "excess_pct_day": round(100 * float(excess.mean()), 4),
        "t": round(float(t), 2),
        "p": float(stats.t.sf(t, len(excess) - 1)),
        "turnover_day": round(float(turnover.mean()), 3),
    }


def study_market(shape: str, level: float, index: int):
    """Market ``index`` of a cell: its seed, splits, the planted predictor, and the train and test
    windows' first-decision rows (``open_rows``: ``(x, y)`` and ``(x, oracle, y, hold)``)."""
    seed = FIRST_SEED + 1000 * round(1000 * level) + index
    splits, predictor = planted_market(shape, seed, level, "library")
    interval = EnvParams().decision_interval
    x, _, y, _ = open_rows(splits.train, predictor, 0, interval)
    test_offset = splits.full.num_steps - splits.test.num_steps
    return seed, splits, predictor, (x, y), open_rows(splits.test, predictor, test_offset, interval)


def market_row(shape: str, level: float, index: int) -> dict:
    start = time.perf_counter()
    seed, _, _, (x, y), (x_test, oracle, y_test, hold) = study_market(shape, level, index)
    cut = int(len(x) * (1 - HOLDOUT))
    fit, held = (x[:cut], y[:cut]), (x[cut:], y[cut:])
    scores = {
        "oracle": oracle,
        "ridge": fit_ridge(*fit, *held)(x_test),
        "lightgbm": fit_lightgbm(*fit, *held, seed)(x_test),
        "mlp": np.mean([fit_mlp(*fit, *held, seed + k)(x_test) for k in range(3)], axis=0),
    }
    cost = sum(cost_per_turnover(EnvParams())) / 2
    row = {"shape": shape, "level": level, "index": index, "seed": seed}
    for name, s in scores.items():
        row[name] = traded(s, hold, cost) | {"ic": round(float(np.nanmean(rank_ic(s, y_test))), 4)}
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


def summary(rows: list[dict], names: tuple[str, ...] = MODELS) -> list[dict]:
    """Per shape and level: for each of ``names``, the markets significant, the median excess and
    turnover, the mean test IC."""
    cells = []
    for shape in DAILY_SHAPES:
        for level in LEVELS:
            cell = [r for r in rows if r["shape"] == shape and r["level"] == level]
            if not cell:
                continue
            out = {"shape": shape, "level": level, "markets": len(cell)}
            for name in names:
                out[name] = {
                    "significant": sum(r[name]["p"] < 0.05 for r in cell),
                    "median_excess_pct_day": round(
                        float(np.median([r[name]["excess_pct_day"] for r in cell])), 3
                    ),
                    "median_turnover_day": round(
                        float(np.median([r[name]["turnover_day"] for r in cell])), 2
                    ),
                    "mean_ic": round(float(np.mean([r[name]["ic"] for r in cell])), 3),
                }
            cells.append(out)
    return cells


def run_study(doc: str, market_row, names: tuple[str, ...], argv: list[str] | None = None) -> dict:
    """A design study's command line: ``market_row(shape, level, index)`` on every market of
    :data:`LEVELS` x ``DAILY_SHAPES``, rows on stderr as they come, the summary on stdout."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--markets", type=int, default=MARKETS)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for shape in DAILY_SHAPES:
        for level in LEVELS:
            for index in range(args.markets):
                rows.append(market_row(shape, level, index))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    result = {"rows": rows, "summary": summary(rows, names)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for cell in result["summary"]:
            print(cell)
    return result


def main(argv: list[str] | None = None) -> dict:
    return run_study(__doc__, market_row, MODELS, argv)


if __name__ == "__main__":
    main()
