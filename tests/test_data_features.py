"""Causal features: no lookahead, known values, train-only normalization, the paper-trading path."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from data.errors import DataError
from data.features import (
    FEATURE_NAMES,
    check_spec,
    compute_features,
    latest_features,
    lookback,
)
from data.loader import build_market
from data.synthetic import SyntheticSpec, generate


def _random_bars(
    num_steps: int = 900, num_assets: int = 3, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    close = 50 * torch.exp(
        torch.cumsum(0.002 * torch.randn(num_steps, num_assets, generator=gen, dtype=torch.float64), 0)
    )
    volume = torch.randint(0, 5000, (num_steps, num_assets), generator=gen).double()
    return close, volume


def test_feature_names_and_shape():
    close, volume = _random_bars()
    feats = compute_features(close, volume)
    assert feats.shape == (900, 3, len(FEATURE_NAMES)) and feats.dtype == torch.float32
    assert torch.isfinite(feats).all()


@pytest.mark.parametrize("t", [0, 1, 13, 389, 390, 391, 700])
def test_changing_bars_after_t_leaves_features_up_to_t_unchanged(t):
    close, volume = _random_bars()
    before = compute_features(close, volume)
    gen = torch.Generator().manual_seed(99)
    close2, volume2 = close.clone(), volume.clone()
    close2[t + 1 :] *= torch.exp(
        0.05 * torch.randn(close2[t + 1 :].shape, generator=gen, dtype=torch.float64)
    )
    volume2[t + 1 :] = volume2[t + 1 :].flip(0) * 3 + 7
    after = compute_features(close2, volume2)
    assert torch.equal(before[: t + 1], after[: t + 1])  # bit for bit
    assert not torch.equal(before[t + 1 :], after[t + 1 :])  # the change did reach the later bars


def test_known_values():
    close = torch.tensor([[100.0], [110.0], [99.0]] + [[99.0]] * 20, dtype=torch.float64)
    volume = torch.full_like(close, 10.0)
    feats = compute_features(close, volume)
    names = list(FEATURE_NAMES)
    assert feats[1, 0, names.index("ret_1")] == pytest.approx(np.log(1.1), rel=1e-6)
    assert feats[2, 0, names.index("ret_15")] == pytest.approx(np.log(0.99), rel=1e-6)  # padded with bar 0
    assert feats[0, 0, names.index("ret_1")] == 0.0
    # RSI-like after one up and one down bar, then flat: gains and losses both decay, stay in [-1, 1]
    rsi = feats[:, 0, names.index("rsi_14")]
    assert rsi[1] == pytest.approx(1.0, abs=1e-6) and (rsi.abs() <= 1.0 + 1e-6).all()
    # constant volume -> z-score 0; constant price after bar 2 -> 1-bar return 0
    assert feats[:, 0, names.index("volume_z")].abs().max() < 1e-3
    assert feats[5:, 0, names.index("ret_1")].abs().max() == 0.0
    # vol_60 at bar 2: std of [0 (padding) x 58, log 1.1, log 0.9]
    rets = np.r_[np.zeros(58), np.log(1.1), np.log(0.9)]
    assert feats[2, 0, names.index("vol_60")] == pytest.approx(rets.std(), rel=1e-4)


def test_latest_features_match_the_full_history_row():
    panel = generate(SyntheticSpec(num_tickers=4, num_sessions=5, seed=2))
    splits = build_market(panel)
    spec = splits.full.feature_spec
    need = spec["lookback"]
    assert need == lookback()
    close = torch.as_tensor(panel.close, dtype=torch.float64)
    volume = torch.as_tensor(panel.volume)
    for t in (need, 1000, len(panel.grid) - 1):
        row = latest_features(close[t + 1 - need : t + 1], volume[t + 1 - need : t + 1], spec)
        torch.testing.assert_close(row, splits.full.features[t], atol=2e-5, rtol=1e-5)


def test_normalization_is_fitted_on_train_only():
    panel = generate(SyntheticSpec(num_tickers=4, num_sessions=5, seed=4))
    base = build_market(panel)
    train_steps = base.train.num_steps
    # Wreck every bar after the train window: the fitted statistics must not move.
    wrecked = type(panel)(**{**panel.__dict__, "close": panel.close.copy(), "volume": panel.volume.copy()})
    wrecked.close[train_steps:] *= 3.0
    wrecked.volume[train_steps:] = 1.0
    other = build_market(wrecked)
    assert other.full.feature_spec["mean"] == base.full.feature_spec["mean"]
    assert other.full.feature_spec["std"] == base.full.feature_spec["std"]
    assert torch.equal(other.train.features, base.train.features)
    # On train, normalized features are close to zero mean / unit std (clipping aside).
    flat = base.train.features.reshape(-1, base.train.num_features)
    assert flat.mean(0).abs().max() < 0.05
    assert ((flat.std(0) - 1).abs() < 0.1).all()


def test_spec_is_json_and_checked():
    splits = build_market(generate(SyntheticSpec(num_tickers=2, num_sessions=5)))
    spec = json.loads(json.dumps(splits.full.feature_spec))
    check_spec(spec)
    assert spec["names"] == list(FEATURE_NAMES) and spec["fitted_on"] == list(splits.train.date_range())
    with pytest.raises(DataError, match="feature spec"):
        check_spec({**spec, "mean": spec["mean"][:-1]})
    with pytest.raises(DataError, match="feature spec"):
        check_spec({"names": []})


def test_bad_shapes_are_data_errors():
    with pytest.raises(DataError):
        compute_features(torch.ones(5, 2), torch.ones(5, 3))
    with pytest.raises(DataError):
        compute_features(torch.ones(0, 2), torch.ones(0, 2))


def test_market_features_up_to_t_ignore_later_bars():
    """Through the loader: bars changed after t (in the test window) leave every feature <= t as is."""
    panel = generate(SyntheticSpec(num_tickers=3, num_sessions=5, seed=6))
    base = build_market(panel)
    t = base.train.num_steps + base.valid.num_steps + 50
    changed = type(panel)(**{**panel.__dict__, "close": panel.close.copy(), "volume": panel.volume.copy()})
    changed.close[t + 1 :] *= 1.5
    changed.volume[t + 1 :] *= 4
    other = build_market(changed)
    assert torch.equal(other.full.features[: t + 1], base.full.features[: t + 1])
    assert not torch.equal(other.full.features[t + 1 :], base.full.features[t + 1 :])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_features_on_cuda_match_cpu():
    panel = generate(SyntheticSpec(num_tickers=3, num_sessions=5, seed=8))
    cpu = build_market(panel, device="cpu")
    gpu = build_market(panel, device="cuda")
    assert gpu.full.features.device.type == "cuda"
    torch.testing.assert_close(gpu.full.features.cpu(), cpu.full.features, atol=1e-4, rtol=1e-4)
