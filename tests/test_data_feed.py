"""What was priced: the bars' data feed (from the data's source metadata, the fetch manifest) and the
volume scale, in metrics.json and in every caption built from it."""

from __future__ import annotations

from datetime import date

from backtests import report
from backtests.metrics_model import MetricsDocument
from data.loader import feed_of_store
from data.sources.chunks import UNRECORDED_FEED, Chunk, FetchManifest, feed_label
from envs.trading import EnvParams


def test_the_feed_is_named_after_the_fetch_manifests_sources(tmp_path):
    manifest = FetchManifest(tmp_path)
    day = date(2024, 6, 1)
    manifest.record(
        "alpaca/iex", "1m", Chunk(("AAPL", "MSFT"), day, date(2024, 6, 30)), {}, today=date(2025, 1, 1)
    )
    manifest.record(
        "yfinance/raw", "1d", Chunk(("AAPL",), day, date(2024, 6, 30)), {}, today=date(2025, 1, 1)
    )
    manifest.close()
    assert feed_of_store(tmp_path, "1m", ["AAPL"]) == "iex"
    assert feed_of_store(tmp_path, "1d", ["AAPL", "MSFT"]) == "yfinance"
    # Bars no fetch recorded (a CSV import) say so; a home without a manifest too (nothing is created).
    assert feed_of_store(tmp_path, "1m", ["NVDA"]) == UNRECORDED_FEED
    empty = tmp_path / "empty"
    assert feed_of_store(empty, "1m", ["AAPL"]) == UNRECORDED_FEED and not empty.exists()
    assert feed_label(["alpaca/sip", "alpaca/iex"]) == "iex+sip"


def test_metrics_json_and_its_captions_carry_the_feed_and_the_volume_scale():
    settings = report.execution_settings(EnvParams(), data_feed="iex", volume_scale=40.0)
    doc = MetricsDocument.parse({"strategies": {"champion": {}}, **settings})
    assert (doc.data_feed, doc.volume_scale) == ("iex", 40.0)
    caption = doc.execution_text()
    assert caption.endswith(", iex bars, volume x40")
    assert "SEC fee and TAF on sells by date, each rounded up to the cent" in caption
    # A document from before these keys: no claim about what it priced.
    assert "bars" not in MetricsDocument.parse({"strategies": {"champion": {}}}).execution_text()
