"""``load_market``'s settings and their defaults (standard library only: the ``[data]`` section of the
config reads them without loading torch)."""

from __future__ import annotations

from typing import Any

#: Defaults of ``load_market``'s settings; also the ``[data]`` defaults of the TOML config (app.config
#: reads them from here), except ``start_date`` / ``end_date``, which only callers pass.
LOAD_DEFAULTS: dict[str, Any] = {
    "source": "synthetic",
    "num_tickers": 100,
    "num_sessions": 60,
    "start": "2024-01-02",
    "signal": 1.0,
    "shape": "minute_momentum",
    "target_ic": None,
    "seed": 0,
    "interval": "1m",
    "tickers": [],
    "universe": "",
    "as_of": "",
    "train_frac": 0.6,
    "valid_frac": 0.2,
    "min_coverage": 0.5,
    "volume_scale": 1.0,
    "features": "small",
    "start_date": None,
    "end_date": None,
}
