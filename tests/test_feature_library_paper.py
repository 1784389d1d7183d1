"""A run trained on the library feature set is paper-traded and re-evaluated with the library set: the
bundle records it, the paper decision's features equal the env's at the same bar (from the bars the
cycle fetches), and the nightly rebuild of a champion's features gives the market's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from test_paper_support import make_run

from app.bundle import load_bundle
from app.export import export_bundle
from app.nightly.normalization import with_feature_spec
from app.paper.broker import BrokerAccount
from app.paper.observation import build_decision, fetch_start
from envs.observation import FEATURES, split_obs

#: Sessions of the market: more than the library's lookback (22 sessions), so the paper window is cut.
SESSIONS = 24


@pytest.fixture(scope="module")
def library_run(tmp_path_factory):
    home = tmp_path_factory.mktemp("library-home")
    run = make_run(home, num_tickers=3, num_sessions=SESSIONS, feature_set="library")
    bundle = load_bundle(export_bundle(run.run_dir, exporter="torchscript"))
    return run, bundle


def test_the_bundle_records_the_library_set(library_run):
    run, bundle = library_run
    spec = bundle.feature_spec
    assert spec["feature_set"] == "library" and bundle.num_features == 30 == run.splits.full.num_features
    assert spec["names"] == list(run.splits.full.feature_names) and spec["lookback"] == 22 * 390


def test_paper_features_equal_the_env_features_at_the_same_bar(library_run):
    run, bundle = library_run
    market = run.splits.full
    bars = run.bars
    lookback = int(bundle.feature_spec["lookback"])
    # The last session's 8th bar (before its first half hour is in), a bar after it, its last bar.
    rows = [market.num_steps - 390 + 7, market.num_steps - 200, market.num_steps - 1]
    for t in rows:
        ts = pd.Timestamp(market.timestamps[t], tz="UTC")
        now = (ts + pd.Timedelta(minutes=1)).to_pydatetime()
        # What the cycle fetches: from fetch_start (the lookback's sessions and one spare) to now.
        fetched = bars[(bars.timestamp >= fetch_start(now, "1m", lookback)) & (bars.timestamp <= ts)]
        assert fetched.timestamp.min() > bars.timestamp.min()  # the window is cut, not the whole history
        decision = build_decision(
            bundle, fetched.reset_index(drop=True), BrokerAccount(1e6, 1e6, 1e6, 1e6), {}, now
        )
        assert decision.decision_ts == ts
        _, per_asset = split_obs(decision.obs, market.num_assets, market.num_features)
        np.testing.assert_allclose(
            per_asset[0, :, FEATURES], market.features[t].numpy(), atol=1e-4, rtol=1e-5, err_msg=f"bar {t}"
        )


def test_nightly_rebuild_of_a_library_champion(library_run):
    run, bundle = library_run
    splits = run.splits
    rebuilt = with_feature_spec(splits.full, splits.test, bundle.feature_spec)
    assert rebuilt.feature_names == splits.test.feature_names and rebuilt.num_features == 30
    # From float32 market prices rather than the float64 bars the loader read: equal to rounding.
    torch.testing.assert_close(rebuilt.features, splits.test.features, atol=2e-3, rtol=1e-4)
