"""What the features carry of each planted shape, and at which decision of the day.

For each planted shape (``data.planted``), one market of the power table's size (100 tickers x 243
sessions split 72 / 45 / 126, the ``--features`` set) is built; at every decision bar of the direct
learner's grid (``agents.direct.decisions_of``: every ``decision_interval`` bars from each window's
first bar) the planted predictor, standardized across names, is the target of two fits on the train
window's decisions: a ridge of the features (what a linear score of them fitted on that window
expresses) and a LightGBM regressor of them (trees: interactions). Printed: each fit's mean
cross-sectional rank IC with the predictor on the test window, over all decisions and at the
session's first, middle and last ones ("last" is the last decision of a full session: an early
close's last decision counts as a middle one; every name counts, tradable or not).

Not a power figure: the fits read the planted predictor itself, which no learner sees; they say how
much of it a score of the features can express at all (a learner fitted to returns finds at most
that). Seeds 1,030,000 + the shape's index, outside the power table's.

    .venv/bin/python benchmarks/shape_visibility.py --features library --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lightgbm as lgb  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from agents.direct import decisions_of  # noqa: E402
from data.features import FEATURE_SETS  # noqa: E402
from data.loader import synthetic_market  # noqa: E402
from data.planted import SHAPES, standardized  # noqa: E402
from data.planted_ic import rank_ic  # noqa: E402
from data.synthetic import SyntheticSpec, planted_predictor  # noqa: E402
from envs.params import EnvParams  # noqa: E402

FIRST_SEED = 1_030_000
SPLIT = dict(num_tickers=100, num_sessions=243, train_frac=72 / 243, valid_frac=45 / 243)


def window_rows(market, predictor: np.ndarray, offset: int, interval: int):
    """Features ``(K, A, F)`` (demeaned across names), the standardized predictor ``(K, A)`` and each
    decision's position in its session, at the window's decision bars."""
    d = decisions_of(market, interval)
    bars = offset + np.arange(d.num) * interval
    x = d.features.numpy().astype(np.float64)
    x = x - x.mean(axis=1, keepdims=True)
    sid = market.session_id.numpy()
    first = np.searchsorted(sid, sid[np.arange(d.num) * interval])
    position = np.arange(d.num) * interval - first
    return x, standardized(np.nan_to_num(predictor[bars])), position // interval


def fits(x: np.ndarray, y: np.ndarray, seed: int) -> dict:
    """The ridge (a small penalty) and the LightGBM regressor of ``y`` on ``x``, as score functions."""
    flat_x, flat_y = x.reshape(-1, x.shape[-1]), y.reshape(-1)
    gram = flat_x.T @ flat_x
    coef = np.linalg.solve(gram + 1e-3 * np.trace(gram) / len(gram) * np.eye(len(gram)), flat_x.T @ flat_y)
    trees = lgb.LGBMRegressor(
        n_estimators=200, learning_rate=0.05, num_leaves=31, subsample=0.5, subsample_freq=1,
        random_state=seed, n_jobs=1, verbose=-1,
    ).fit(flat_x, flat_y)  # fmt: skip
    return {
        "ridge": lambda z: z @ coef,
        "lightgbm": lambda z: trees.predict(z.reshape(-1, z.shape[-1])).reshape(z.shape[:-1]),
    }


def planted_market(shape: str, seed: int, target_ic: float, feature_set: str):
    """The market of :data:`SPLIT`'s size (its splits) and its planted predictor ``(T, A)``."""
    splits = synthetic_market(seed=seed, shape=shape, target_ic=target_ic, feature_set=feature_set, **SPLIT)
    spec = SyntheticSpec(
        num_tickers=SPLIT["num_tickers"], num_sessions=SPLIT["num_sessions"], seed=seed, shape=shape,
        target_ic=target_ic,
    )  # fmt: skip
    return splits, planted_predictor(spec)


def shape_row(shape: str, index: int, feature_set: str, target_ic: float) -> dict:
    seed = FIRST_SEED + index
    start = time.perf_counter()
    splits, predictor = planted_market(shape, seed, target_ic, feature_set)
    interval = EnvParams().decision_interval
    test_offset = splits.full.num_steps - splits.test.num_steps
    x_train, y_train, _ = window_rows(splits.train, predictor, 0, interval)
    x_test, y_test, position = window_rows(splits.test, predictor, test_offset, interval)
    last = position.max()
    groups = {"all": position >= 0, "first": position == 0, "middle": (position > 0) & (position < last)}
    groups["last"] = position == last
    row = {"shape": shape, "seed": seed, "features": feature_set, "decisions_per_session": int(last) + 1}
    for name, score in fits(x_train, y_train, seed).items():
        s = score(x_test)
        ic = rank_ic(np.asarray(s), y_test)
        row[name] = {group: round(float(np.nanmean(ic[mask])), 3) for group, mask in groups.items()}
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--features", default="library", choices=FEATURE_SETS)
    p.add_argument("--ic", type=float, default=0.10, help="the planted level (daily rank IC)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = [shape_row(shape, i, args.features, args.ic) for i, shape in enumerate(SHAPES)]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(r)
    return rows


if __name__ == "__main__":
    main()
