"""load_market / synthetic_market: splits by whole sessions, no overlap, the MarketData contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from data.errors import DataError
from data.loader import load_market, synthetic_market


def test_synthetic_market_splits_by_whole_sessions():
    splits = synthetic_market(num_tickers=5, num_sessions=10, seed=0, signal=1.0)
    full = splits.full
    assert full.num_assets == 5 and full.num_sessions == 10 and full.num_steps == 10 * 390
    assert full.tickers == tuple(f"SYN{i:03d}" for i in range(5))
    sizes = [splits.train.num_steps, splits.valid.num_steps, splits.test.num_steps]
    assert sizes == [6 * 390, 2 * 390, 2 * 390]
    sets = [set(w.session_id.tolist()) for w in (splits.train, splits.valid, splits.test)]
    assert not (sets[0] & sets[1]) and not (sets[1] & sets[2]) and not (sets[0] & sets[2])
    assert max(sets[0]) < min(sets[1]) and max(sets[1]) < min(sets[2])
    assert splits.train.timestamps[-1] < splits.valid.timestamps[0] < splits.test.timestamps[0]
    assert splits.windows()["train"] == ("2024-01-02", "2024-01-09")
    assert full.interval == "1m" and full.features.dtype == torch.float32
    assert full.time_of_day.min() > 0 and full.time_of_day.max() == pytest.approx(1.0)
    assert full.timestamps.dtype == np.dtype("datetime64[ns]")


def test_load_market_synthetic_uses_the_config_fields():
    class Cfg:  # anything with DataConfig's field names
        source = "synthetic"
        num_tickers = 3
        num_sessions = 5
        start = "2024-03-01"
        signal = 0.0
        seed = 5
        interval = "15m"
        tickers: list[str] = []
        train_frac = 0.6
        valid_frac = 0.2
        min_coverage = 0.5

    splits = load_market(Cfg())
    assert splits.full.interval == "15m" and splits.full.num_steps == 5 * 26
    assert splits.full.date_range() == ("2024-03-01", "2024-03-07")
    assert splits.full.feature_spec["interval"] == "15m"


def test_load_market_with_the_app_config():
    from app.config import DataConfig

    splits = load_market(DataConfig(num_tickers=2, num_sessions=5, seed=1))
    assert splits.full.num_assets == 2 and splits.full.num_sessions == 5


def test_to_device_keeps_the_windows():
    splits = synthetic_market(num_tickers=2, num_sessions=5)
    moved = splits.to("cpu")
    assert moved.test.num_steps == splits.test.num_steps
    assert torch.equal(moved.test.close, splits.test.close)


def test_bad_settings_are_one_line_errors():
    with pytest.raises(DataError, match="unknown setting"):
        load_market(bogus=1)
    with pytest.raises(DataError, match="unknown data source"):
        load_market(source="ftp")
    with pytest.raises(DataError, match="too few"):
        synthetic_market(num_tickers=2, num_sessions=2)


def test_stored_minutes_serve_coarser_intervals(tmp_path):
    from data.store import BarStore
    from data.synthetic import SyntheticSpec, write_synthetic

    write_synthetic(tmp_path, SyntheticSpec(num_tickers=2, num_sessions=5, seed=3))
    assert BarStore(tmp_path).intervals() == ["1m"]
    minute = load_market(source="stored", home=tmp_path)
    hourly = load_market(source="stored", home=tmp_path, interval="1h")
    assert hourly.full.interval == "1h" and hourly.full.num_steps == 5 * 7
    # the 10:30 bar closes at the 11:29 minute's close, opens at the 10:30 minute's open
    torch.testing.assert_close(hourly.full.close[1], minute.full.close[119])
    torch.testing.assert_close(hourly.full.open[1], minute.full.open[60])
    torch.testing.assert_close(hourly.full.volume[1], minute.full.volume[60:120].sum(0))
    assert hourly.full.time_of_day[6].item() == pytest.approx(1.0)
