"""The library feature set: a slow per-bar reference, causality bit for bit, the paper-trading row, the
spec and the loader's choice of set (the small set's own tests: tests/test_data_features.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from data.errors import DataError
from data.feature_library import LIBRARY_WINDOWS, FeatureBars, cross_rank, library_names
from data.features import (
    DEFAULT_WINDOWS,
    FEATURE_NAMES,
    check_spec,
    compute_features,
    compute_set,
    feature_names,
    feature_windows,
    latest_set,
    lookback,
)
from data.loader import build_market
from data.synthetic import SyntheticSpec, generate

#: Short windows so that a few tiny sessions exercise every edge (sessions before the data, partial
#: windows, early closes).
SMALL = {
    **DEFAULT_WINDOWS,
    **LIBRARY_WINDOWS,
    "sret_a": 1,
    "sret_b": 2,
    "sret_c": 3,
    "sret_d": 4,
    "rv_short": 2,
    "rv_long": 4,
    "volume_sessions": 3,
    "range_sessions": 3,
    "beta_sessions": 3,
    "opening_bars": 3,
    "bars_per_session": 10,
}
#: Bars of each session of the tiny market: an early close (6) and a partial first session (7).
LENGTHS = (7, 10, 10, 6, 10, 10, 10, 10)


def _bars(lengths=LENGTHS, num_assets: int = 4, seed: int = 0) -> FeatureBars:
    gen = torch.Generator().manual_seed(seed)
    num_steps = sum(lengths)
    close = 50 * torch.exp(
        torch.cumsum(0.01 * torch.randn(num_steps, num_assets, generator=gen, dtype=torch.float64), 0)
    )
    open_ = close * torch.exp(0.004 * torch.randn(num_steps, num_assets, generator=gen, dtype=torch.float64))
    high = torch.maximum(open_, close) * (
        1 + 0.003 * torch.rand(num_steps, num_assets, generator=gen, dtype=torch.float64)
    )
    low = torch.minimum(open_, close) * (
        1 - 0.003 * torch.rand(num_steps, num_assets, generator=gen, dtype=torch.float64)
    )
    volume = torch.randint(0, 5000, (num_steps, num_assets), generator=gen).double()
    session_id = torch.as_tensor(np.repeat(np.arange(len(lengths)) + 100, lengths))
    return FeatureBars(open_, high, low, close, volume, session_id)


def _reference(bars: FeatureBars, w: dict[str, int]) -> np.ndarray:
    """The library columns ``(T, A, 22)`` bar by bar in plain Python, straight from docs/data.md."""
    o, h, lo, c, v = (x.numpy() for x in bars[:5])
    sid = bars.session_id.numpy()
    num_steps, num_assets = c.shape
    starts = [0] + [t for t in range(1, num_steps) if sid[t] != sid[t - 1]]
    session = np.searchsorted(starts, np.arange(num_steps), side="right") - 1
    ends = [*(s - 1 for s in starts[1:]), num_steps - 1]

    def close_of(j, a):  # C[j]; before the data: the first open
        return c[ends[j], a] if j >= 0 else o[0, a]

    def daily(j, a):
        return math.log(close_of(j, a)) - math.log(close_of(j - 1, a))

    def cum_at(j, p, a, values):  # session j's cumulative values up to position p (its total past its end)
        return values[starts[j] : min(starts[j] + p, ends[j]) + 1, a].sum()

    out = np.zeros((num_steps, num_assets, 22))
    for t in range(num_steps):
        s, p = session[t], t - starts[session[t]]
        for a in range(num_assets):
            row = [
                math.log(c[t, a]) - math.log(close_of(s - w[k], a))
                for k in ("sret_a", "sret_b", "sret_c", "sret_d")
            ]
            row.append(math.log(o[starts[s], a]) - math.log(close_of(s - 1, a)))
            hb = w["opening_bars"]
            row.append(math.log(c[starts[s] + hb - 1, a]) - math.log(o[starts[s], a]) if p >= hb - 1 else 0.0)
            row += [0.0] * 6  # cross-sectional: filled below
            sd = [
                np.std([daily(j, a) for j in range(max(0, s - n), s)] or [0.0])
                for n in (w["rv_short"], w["rv_long"])
            ]
            row.append(math.log((sd[0] + 1e-6) / (sd[1] + 1e-6)))
            n = w["volume_sessions"]
            for values in (v, v * c):
                prior = [cum_at(j, p, a, values) for j in range(max(0, s - n), s)]
                today = values[starts[s] : t + 1, a].sum()
                row.append(math.log1p(today) - math.log1p(np.mean(prior)) if prior else 0.0)
            first = starts[max(0, s - w["range_sessions"] + 1)]
            row.append(math.log(c[t, a]) - math.log(h[first : t + 1, a].max()))
            row.append(math.log(c[t, a]) - math.log(lo[first : t + 1, a].min()))
            out[t, a, :17] = row
        for i, k in enumerate(("sret_a", "sret_b", "sret_d")):
            r = out[t, :, ("sret_a", "sret_b", "sret_c", "sret_d").index(k)]
            out[t, :, 6 + i] = r - r.mean()
            rank = np.array([(r < x).sum() + ((r == x).sum() - 1) / 2 for x in r])
            out[t, :, 9 + i] = rank / (num_assets - 1) - 0.5
        n = w["beta_sessions"]
        window = range(max(0, s - n), s)
        if len(window) >= 2:
            ri = np.array([[daily(j, a) for a in range(num_assets)] for j in window])
            rm = ri.mean(axis=1)
            var = ((rm - rm.mean()) ** 2).mean()
            cov = ((ri - ri.mean(0)) * (rm - rm.mean())[:, None]).mean(0)
            out[t, :, 17] = cov / var if var > 1e-14 else 0.0
        n = w["rv_long"]  # (the volatility of a full window only)
        sd = [np.std([daily(j, a) for j in range(s - n, s)]) if s >= n else 0.0 for a in range(num_assets)]
        past = [
            [math.log(close_of(s - 1, a)) - math.log(close_of(s - 1 - w[k], a)) for a in range(num_assets)]
            for k in ("sret_a", "sret_b", "sret_d")
        ]
        rolling = [math.log(c[t, a]) - math.log(c[max(t - w["ret_long"], 0), a]) for a in range(num_assets)]
        horizons = [w["sret_a"], w["sret_b"], w["sret_d"], w["ret_long"] / w["bars_per_session"]]
        for i, (r, horizon) in enumerate(zip([*past, rolling], horizons, strict=True)):
            r = np.array(r)
            out[t, :, 18 + i] = [
                (r[a] - r.mean()) / (sd[a] * math.sqrt(horizon)) if sd[a] > 1e-6 else 0.0
                for a in range(num_assets)
            ]
    return out


def test_names_and_shape():
    bars = _bars()
    feats = compute_set(bars, SMALL)
    names = feature_names(SMALL)
    assert names[:8] == ("ret_1", "ret_15", "ret_60", "ret_390", "vol_60", "rsi_14", "macd", "volume_z")
    assert names[8:] == library_names(SMALL) and len(names) == 30 == feats.shape[-1]
    assert feats.shape[:2] == bars.close.shape and feats.dtype == torch.float32
    assert torch.isfinite(feats).all()
    default = feature_names(feature_windows("library", "1m"))
    assert default[8:14] == ("sret_1d", "sret_5d", "sret_10d", "sret_20d", "gap", "first_30m")
    assert default[25:] == ("beta_20d", "zret_1d", "zret_5d", "zret_20d", "zret_390") and len(default) == 30


def test_library_matches_the_slow_reference():
    bars = _bars()
    feats = compute_set(bars, SMALL)[..., 8:].double().numpy()
    ref = _reference(bars, SMALL)
    np.testing.assert_allclose(feats, ref, rtol=2e-5, atol=2e-6)
    # The small columns are the small set's, untouched.
    assert torch.equal(compute_set(bars, SMALL)[..., :8], compute_features(bars.close, bars.volume))


def test_known_answers_by_hand():
    """Two tickers, sessions of 2 bars: each value worked out by hand."""
    close = torch.tensor([[10.0, 20.0], [11.0, 20.0], [12.0, 22.0], [12.0, 24.0]], dtype=torch.float64)
    open_ = torch.tensor([[9.0, 20.0], [10.0, 20.0], [13.0, 21.0], [12.0, 22.0]], dtype=torch.float64)
    volume = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], dtype=torch.float64)
    bars = FeatureBars(open_, close * 1.01, close * 0.99, close, volume, torch.tensor([0, 0, 1, 1]))
    w = {**SMALL, "opening_bars": 2, "bars_per_session": 2}
    lib = dict(zip(feature_names(w)[8:], compute_set(bars, w)[..., 8:].unbind(-1), strict=True))
    log = math.log
    assert lib["sret_1d"][0, 0] == pytest.approx(log(10 / 9))  # before the data: the first open
    assert lib["sret_1d"][2, 0] == pytest.approx(log(12 / 11))  # yesterday's close 11
    assert lib["sret_2d"][3, 1] == pytest.approx(log(24 / 20))  # two sessions back: the first open 20
    assert lib["gap"][2, 0] == pytest.approx(log(13 / 11)) and lib["gap"][1, 0] == 0.0
    assert lib["first_30m"][2, 0] == 0.0  # the opening's second bar is not in yet
    assert lib["first_30m"][3, 0] == pytest.approx(log(12 / 13))
    assert lib["xret_1d"][2, 0] == pytest.approx(log(12 / 11) - (log(12 / 11) + log(22 / 20)) / 2)
    assert lib["xrank_1d"][2].tolist() == [-0.5, 0.5]  # 0.087 < 0.095
    # Volume so far today vs yesterday's at the same position: 5 vs 1, then 12 vs 4.
    assert lib["volu_3d"][2, 0] == pytest.approx(math.log1p(5) - math.log1p(1))
    assert lib["volu_3d"][3, 0] == pytest.approx(math.log1p(12) - math.log1p(4))
    assert lib["volu_3d"][:2].abs().max() == 0.0  # no earlier session
    assert lib["high_3d"][3, 1] == pytest.approx(log(24 / (24 * 1.01)))


def test_cross_rank_ties_and_scale():
    x = torch.tensor([[3.0, 1.0, 1.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    # 0-based ranks 3, 0.5, 0.5 (the tie's mean of 0 and 1), 2 over 3: scaled by 1/3, less 0.5.
    torch.testing.assert_close(cross_rank(x), torch.tensor([[0.5, -1 / 3, -1 / 3, 1 / 6], [0.0] * 4]))
    assert cross_rank(torch.ones(3, 1)).abs().max() == 0.0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cross_rank_equals_the_binary_searches_bit_for_bit(dtype):
    """The CPU's sort-and-scan counts against their definition (two binary searches in the sorted
    row), with ties, zeros of both signs, infinities and NaN (which takes the searches themselves)."""
    gen = torch.Generator().manual_seed(5)
    for trial in range(40):
        width = 1 + trial % 13
        x = (torch.randint(-3, 4, (30, width), generator=gen) * 0.5).to(dtype)
        if trial % 2:
            x = torch.randn(30, width, generator=gen).to(dtype)
        x[torch.rand(x.shape, generator=gen) < 0.15] = -0.0
        x[torch.rand(x.shape, generator=gen) < 0.05] = math.inf
        if trial % 4 == 3:
            x[torch.rand(x.shape, generator=gen) < 0.1] = math.nan
        for y in (x, x.T.contiguous().T):  # and a non-contiguous row layout
            ordered = torch.sort(y, dim=1).values.contiguous()
            below = torch.searchsorted(ordered, y.contiguous(), right=False)
            upto = torch.searchsorted(ordered, y.contiguous(), right=True)
            want = (below + upto - 1).to(dtype) / (2.0 * max(width - 1, 1)) - 0.5
            want = want if width > 1 else torch.zeros_like(y)
            assert torch.equal(cross_rank(y), want), trial


@pytest.mark.parametrize("t", [0, 6, 7, 9, 16, 30, 32, 33, 50])
def test_changing_bars_after_t_leaves_every_library_feature_up_to_t_bit_identical(t):
    bars = _bars()
    before = compute_set(bars, SMALL)
    gen = torch.Generator().manual_seed(99)
    changed = []
    for x in bars[:5]:
        y = x.clone()
        y[t + 1 :] *= torch.exp(0.2 * torch.randn(y[t + 1 :].shape, generator=gen, dtype=torch.float64))
        changed.append(y)
    after = compute_set(FeatureBars(*changed, bars.session_id), SMALL)
    assert torch.equal(before[: t + 1], after[: t + 1])  # bit for bit, every column
    later = (before[t + 1 :] != after[t + 1 :]).flatten(0, 1).any(0)
    assert bool(later[8:].all())  # the change reached every library column later on


def test_latest_row_from_the_lookback_window_equals_the_full_history():
    panel = generate(SyntheticSpec(num_tickers=3, num_sessions=8, seed=3))
    splits = build_market(panel, feature_set="library")
    spec = splits.full.feature_spec
    short = {"sret_b": 2, "sret_c": 3, "sret_d": 4, "rv_short": 2, "rv_long": 4}
    w = dict(spec["windows"], **short, volume_sessions=4, range_sessions=4, beta_sessions=4)
    need = lookback(w)
    assert need == 6 * 390
    f64 = {"dtype": torch.float64}
    bars = FeatureBars(
        *(torch.as_tensor(getattr(panel, n), **f64) for n in ("open", "high", "low", "close", "volume")),
        torch.as_tensor(panel.grid.session_id),
    )
    full = compute_set(bars, w)
    for t in (need + 5, 2729, 2730, len(panel.grid) - 1):
        window = FeatureBars(*(x[t + 1 - need : t + 1] for x in bars))
        torch.testing.assert_close(compute_set(window, w)[-1], full[t], atol=2e-5, rtol=1e-5)
    # The set's own spec: the paper path on the last lookback bars gives the market's row.
    t = len(panel.grid) - 1
    assert spec["lookback"] == lookback(spec["windows"]) == 22 * 390
    row = latest_set(FeatureBars(*(x[max(0, t + 1 - spec["lookback"]) : t + 1] for x in bars)), spec)
    torch.testing.assert_close(row, splits.full.features[t], atol=1e-4, rtol=1e-5)


def test_spec_names_the_set_and_small_specs_stay_as_they_were():
    panel = generate(SyntheticSpec(num_tickers=2, num_sessions=5))
    small = build_market(panel).full.feature_spec
    assert "feature_set" not in small and small["names"] == list(FEATURE_NAMES)
    assert small == build_market(panel, feature_set="small").full.feature_spec
    library = json.loads(json.dumps(build_market(panel, feature_set="library").full.feature_spec))
    check_spec(library)
    assert library["feature_set"] == "library" and len(library["names"]) == 30
    with pytest.raises(DataError, match="feature spec"):
        check_spec({**library, "windows": small["windows"]})
    with pytest.raises(DataError, match="unknown feature set"):
        feature_windows("huge")
    with pytest.raises(DataError, match="library set reads"):
        compute_features(torch.ones(5, 2), torch.ones(5, 2), library["windows"])


def test_small_default_is_bit_identical_through_compute_set():
    bars = _bars()
    assert torch.equal(compute_set(bars, DEFAULT_WINDOWS), compute_features(bars.close, bars.volume))


def test_windows_follow_the_interval():
    assert feature_windows("library", "5m")["opening_bars"] == 6
    assert feature_windows("library", "1h")["opening_bars"] == 1
    assert feature_windows("library", "1d")["bars_per_session"] == 1
    assert feature_windows("library", "1m", session_bars=960)["bars_per_session"] == 960  # extended hours


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_library_on_cuda_matches_cpu():
    bars = _bars(lengths=(390,) * 25, num_assets=20)
    w = feature_windows("library", "1m")
    cpu = compute_set(bars, w)
    gpu = compute_set(FeatureBars(*(x.cuda() for x in bars)), w)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def library_market():
    return build_market(generate(SyntheticSpec(num_tickers=3, num_sessions=6, seed=5)), feature_set="library")


def test_a_fold_of_a_library_market_computes_the_library_set(library_market):
    """The walk-forward's folds follow the market's set: a fold's raw features are the whole market's
    rows (computed from the lookback before the fold; here the whole history)."""
    from data.fold_market import fold_market, market_bars

    full = library_market.full
    start, stop = 2 * 390, 6 * 390
    fold = fold_market(full, start, stop, fit=(start, 4 * 390))
    assert fold.market.feature_names == full.feature_names and fold.spec["feature_set"] == "library"
    whole = compute_set(market_bars(full), full.feature_spec["windows"])
    assert torch.equal(fold.raw, whole[start:stop])


def test_the_policy_and_the_env_take_the_width_of_the_set(library_market):
    from agents.args import DirectArgs
    from agents.training import policy_for_env
    from envs.observation import obs_dim
    from envs.vec_env import TradingVecEnv

    env = TradingVecEnv(library_market.train, num_envs=2, seed=0)
    obs = env.reset()
    obs = obs[0] if isinstance(obs, tuple) else obs
    assert obs.shape == (2, obs_dim(3, 30))
    stepped = env.step(torch.full((2, 3), 0.3))[0]  # the native kernel's observation of 30 features
    assert stepped.shape == obs.shape and bool(torch.isfinite(stepped).all())
    policy, _ = policy_for_env(None, env, DirectArgs(), "direct")
    assert policy.obs_dim == obs_dim(3, 30) and policy.meta.feature_names == library_market.full.feature_names


def test_market_library_features_up_to_t_ignore_later_bars():
    """Through the loader: every price and volume changed after t (in the test window) leaves every
    normalized feature <= t bit-identical (normalization is fitted on the train window)."""
    panel = generate(SyntheticSpec(num_tickers=3, num_sessions=6, seed=6))
    base = build_market(panel, feature_set="library")
    t = base.train.num_steps + base.valid.num_steps + 50
    arrays = {name: getattr(panel, name).copy() for name in ("open", "high", "low", "close", "volume")}
    for name in ("open", "high", "low", "close"):
        arrays[name][t + 1 :] *= 1.5
    arrays["volume"][t + 1 :] *= 4
    other = build_market(type(panel)(**{**panel.__dict__, **arrays}), feature_set="library")
    assert other.full.feature_spec == base.full.feature_spec
    assert torch.equal(other.full.features[: t + 1], base.full.features[: t + 1])
    assert not torch.equal(other.full.features[t + 1 :], base.full.features[t + 1 :])
