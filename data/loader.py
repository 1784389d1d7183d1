"""Build ``MarketSplits(full, train, valid, test)`` from a source: synthetic, stored, or real-sample.

``train``, ``valid`` and ``test`` are contiguous, non-overlapping slices of ``full`` by whole
sessions (``MarketData.split_sessions``). Features are computed causally on ``full`` and normalized
with statistics fitted on the ``train`` rows only, so nothing about valid/test leaks into training.

Other stages call ``synthetic_market(...)`` (fast, in memory) in their unit tests, and
``load_market(config, ...)`` where a run starts. ``config`` is anything with the fields of
``app.config.DataConfig`` (read by attribute; ``data`` never imports ``app``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from data.align import Panel, resample_panel
from data.errors import DataError
from data.features import (
    FeatureBars,
    compute_set,
    feature_windows,
    fit_normalization,
    make_spec,
    normalize,
)
from data.load_defaults import LOAD_DEFAULTS
from data.market import MarketData
from data.schema import normalize_ticker
from data.sources.chunks import FetchManifest, feed_label
from data.sources.sample import real_sample_panel
from data.store import BarStore
from data.synthetic import SyntheticSpec, generate, to_frame
from data.universe import check_universe, members, members_between, membership_mask, resolve_tickers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MarketSplits:
    """The whole market and its train / valid / test windows (views of ``full``)."""

    full: MarketData
    train: MarketData
    valid: MarketData
    test: MarketData
    source: str = "synthetic"
    gaps_filled: dict[str, int] = field(default_factory=dict)
    #: the data feed that priced it (reports carry it): "synthetic", "embedded sample", or for stored
    #: bars the fetch manifest's ("iex" for Alpaca's free feed, "sip", "yfinance"; ``feed_of_store``)
    feed: str = "synthetic"

    def to(self, device: str | torch.device) -> MarketSplits:
        """The same splits on ``device``."""
        full = self.full.to(device)
        sizes = (self.train.num_steps, self.valid.num_steps)
        return MarketSplits(
            full,
            full.slice(0, sizes[0]),
            full.slice(sizes[0], sizes[0] + sizes[1]),
            full.slice(sizes[0] + sizes[1], full.num_steps),
            self.source,
            dict(self.gaps_filled),
            self.feed,
        )

    def windows(self) -> dict[str, tuple[str, str]]:
        """First and last session date of each window (for the run record / reports)."""
        return {name: getattr(self, name).date_range() for name in ("train", "valid", "test")}


def _tradable(panel: Panel) -> np.ndarray:
    """Where a ticker can trade: a real bar, inside membership. ``listed`` is computed from this over
    the whole history, so that a window cut out of it still knows whether a ticker trades again after
    its end."""
    tradable = (
        np.ones(panel.close.shape, dtype=bool) if panel.real is None else np.array(panel.real, dtype=bool)
    )
    if panel.member is not None:
        tradable &= np.asarray(panel.member, dtype=bool)
    return tradable


def _normalized(provisional: MarketData, raw: torch.Tensor, spec: dict[str, Any]) -> MarketData:
    """``provisional`` with its raw features replaced by the ones normalized with ``spec`` (the
    derived per-ticker arrays are carried over, not recomputed)."""
    return MarketData(
        **{
            name: getattr(provisional, name)
            for name in (
                "tickers",
                "timestamps",
                "open",
                "high",
                "low",
                "close",
                "volume",
                "session_id",
                "time_of_day",
                "interval",
                "tradable",
                "listed",
                "daily_vol",
                "adv",
                "expected_volume",
                "half_spread",
            )
        },
        features=normalize(raw, spec),
        feature_names=tuple(spec["names"]),
        feature_spec=spec,
    )


def build_market(
    panel: Panel,
    *,
    train_frac: float = 0.6,
    valid_frac: float = 0.2,
    device: str | torch.device = "cpu",
    windows: Mapping[str, int] | None = None,
    source: str = "panel",
    feature_set: str = "small",
) -> MarketSplits:
    """Dense panel -> MarketData with causal, train-normalized features, split by sessions.

    ``feature_set`` (``data.features.FEATURE_SETS``) picks the features unless ``windows`` are given."""
    device = torch.device(device)
    if windows is None:
        windows = feature_windows(feature_set, panel.interval, _longest_session(panel.grid.session_id))
    f32 = {"dtype": torch.float32, "device": device}
    # np.array copies: panel arrays may be read-only views, which torch refuses to share.
    prices = {
        name: torch.as_tensor(np.array(getattr(panel, name)), **f32)
        for name in ("open", "high", "low", "close")
    }
    volume = torch.as_tensor(np.array(panel.volume), **f32)
    # Features from float64 close where the device allows: log-returns of adjacent float32 prices
    # lose digits.
    work = {"dtype": torch.float32 if device.type == "mps" else torch.float64, "device": device}
    raw = compute_set(
        FeatureBars(
            *(
                torch.as_tensor(np.array(getattr(panel, name)), **work)
                for name in ("open", "high", "low", "close")
            ),
            volume,
            torch.as_tensor(np.asarray(panel.grid.session_id), device=device),
        ),
        windows,
    )
    # Renumber sessions 0..S-1 in the order they appear (the panel may have trimmed a partial start).
    _, session_id = np.unique(panel.grid.session_id, return_inverse=True)
    provisional = MarketData(
        tickers=panel.tickers,
        timestamps=panel.grid.timestamps.astype("datetime64[ns]"),
        **prices,
        volume=volume,
        features=raw,
        feature_names=tuple(f"f{i}" for i in range(raw.shape[-1])),
        session_id=torch.as_tensor(session_id, dtype=torch.int64, device=device),
        time_of_day=torch.as_tensor(panel.grid.time_of_day, **f32),
        interval=panel.interval,
        tradable=torch.as_tensor(_tradable(panel), device=device),
    )
    train, valid, _ = provisional.split_sessions(train_frac, valid_frac)
    mean, std = fit_normalization(raw[: train.num_steps])
    spec = make_spec(mean, std, windows, interval=panel.interval, fitted_on=train.date_range())
    full = _normalized(provisional, raw, spec)
    cut1, cut2 = train.num_steps, train.num_steps + valid.num_steps
    return MarketSplits(
        full=full,
        train=full.slice(0, cut1),
        valid=full.slice(cut1, cut2),
        test=full.slice(cut2, full.num_steps),
        source=source,
        gaps_filled=dict(panel.gaps_filled),
    )


def _longest_session(session_id: np.ndarray) -> int:
    """Bars of the longest session of a grid (an extended-hours grid's sessions are longer than the
    interval's regular one)."""
    ids = np.asarray(session_id)
    return int(np.unique(ids, return_counts=True)[1].max()) if len(ids) else 0


def synthetic_market(
    num_tickers: int = 8,
    num_sessions: int = 10,
    seed: int = 0,
    signal: float = 1.0,
    device: str | torch.device = "cpu",
    *,
    train_frac: float = 0.6,
    valid_frac: float = 0.2,
    start: str = "2024-01-02",
    feature_set: str = "small",
    shape: str = "minute_momentum",
    target_ic: float | None = None,
) -> MarketSplits:
    """Fast path: a synthetic market generated in memory (see ``data.synthetic``)."""
    spec = SyntheticSpec(
        num_tickers=num_tickers,
        num_sessions=num_sessions,
        seed=seed,
        signal=signal,
        start=start,
        shape=shape,
        target_ic=target_ic,
    )
    return build_market(
        generate(spec),
        train_frac=train_frac,
        valid_frac=valid_frac,
        device=device,
        source="synthetic",
        feature_set=feature_set,
    )


def _settings(config: Any, overrides: Mapping[str, Any]) -> dict[str, Any]:
    settings = dict(LOAD_DEFAULTS)
    if config is not None:
        for key in LOAD_DEFAULTS:
            if hasattr(config, key):
                settings[key] = getattr(config, key)
    for key, value in overrides.items():
        if key not in LOAD_DEFAULTS:
            raise DataError(f"load_market: unknown setting {key!r}")
        settings[key] = value
    return settings


def load_market(
    config: Any = None,
    *,
    home: str | os.PathLike[str] | None = None,
    device: str | torch.device = "cpu",
    store_synthetic: bool = False,
    per_window: bool = False,
    **overrides: Any,
) -> MarketSplits:
    """Load the market a run trains and tests on.

    ``config``: an ``app.config.DataConfig`` (or any object with its fields; None = defaults), with
    ``overrides`` (same names) on top. Sources:
    - ``synthetic``: generate in memory (``store_synthetic=True`` also writes the bars to the store);
    - ``stored``: bars imported/fetched into ``<home>/data/bars`` (``tickers`` empty = all);
    - ``real-sample``: the small real sample shipped with podracer (SPY, IBM, BAC, AIG, Oct 2013).

    ``per_window=True`` (the walk-forward): no ticker is dropped for its coverage and none moves the
    start (bars before a ticker's first one are carried, never tradable), and a ``universe`` gives
    every member of any day of the span (membership by session as always): the caller picks each
    window's tickers from its own bars (``data.fold_market.fold_universe``), so nothing after a
    window decides what it trades. The train/valid/test splits then keep every ticker.
    """
    s = _settings(config, overrides)
    splits = _load_splits(s, home=home, device=device, store_synthetic=store_synthetic, per_window=per_window)
    return with_volume_scale(splits, float(s["volume_scale"]))


def with_volume_scale(splits: MarketSplits, scale: float) -> MarketSplits:
    """``splits`` whose execution-model volumes (``MarketData.expected_volume`` and ``adv``: the volume
    cap and the impact) are ``scale`` times the bars' (``[data] volume_scale``; the bars and their
    features stay as they are). ``scale`` 1 returns ``splits`` itself."""
    if scale == 1.0:
        return splits
    full = dataclasses.replace(
        splits.full, adv=splits.full.adv * scale, expected_volume=splits.full.expected_volume * scale
    )
    cut1 = splits.train.num_steps
    cut2 = cut1 + splits.valid.num_steps
    return dataclasses.replace(
        splits,
        full=full,
        train=full.slice(0, cut1),
        valid=full.slice(cut1, cut2),
        test=full.slice(cut2, full.num_steps),
    )


def _load_splits(
    s: dict[str, Any],
    *,
    home: str | os.PathLike[str] | None,
    device: str | torch.device,
    store_synthetic: bool,
    per_window: bool,
) -> MarketSplits:
    """:func:`load_market` of resolved settings ``s``, before the volume scale."""
    split = {
        "train_frac": s["train_frac"],
        "valid_frac": s["valid_frac"],
        "device": device,
        "feature_set": s["features"],
    }
    if s["source"] == "synthetic":
        spec = SyntheticSpec(
            num_tickers=s["num_tickers"],
            num_sessions=s["num_sessions"],
            seed=s["seed"],
            signal=s["signal"],
            start=s["start"],
            shape=s["shape"],
            target_ic=s["target_ic"],
        )
        panel = generate(spec)
        if store_synthetic:
            BarStore(_home(home)).write(to_frame(panel), interval="1m", source="synthetic")
        if s["interval"] != "1m":
            panel = resample_panel(panel, s["interval"])
        return build_market(panel, **split, source="synthetic")
    if s["source"] == "stored":
        store = BarStore(_home(home))
        # Coarser intervals not stored themselves are aggregated from stored 1m bars.
        from_minutes = s["interval"] not in store.intervals() and "1m" in store.intervals()
        stored_interval = "1m" if from_minutes else s["interval"]
        panel = store.load_panel(
            interval=stored_interval,
            tickers=universe_tickers(store, stored_interval, s, span=per_window) or None,
            start=s["start_date"],
            end=s["end_date"],
            min_coverage=0.0 if per_window else s["min_coverage"],
            coverage_frac=s["train_frac"],  # judged on the train window only
            carry_leading=per_window,
        )
        if check_universe(s["universe"]):
            panel = with_membership(panel, s["tickers"])
        if from_minutes:
            panel = resample_panel(panel, s["interval"])
        feed = feed_of_store(_home(home), stored_interval, list(panel.tickers))
        return dataclasses.replace(build_market(panel, **split, source="stored"), feed=feed)
    if s["source"] == "real-sample":
        panel = real_sample_panel(
            interval=s["interval"],
            min_coverage=0.0 if per_window else s["min_coverage"],
            coverage_frac=s["train_frac"],
            carry_leading=per_window,
        )
        return dataclasses.replace(build_market(panel, **split, source="real-sample"), feed="embedded sample")
    raise DataError(f"unknown data source {s['source']!r} (synthetic, stored, real-sample)")


def feed_of_store(home: str | os.PathLike[str], interval: str, tickers: Sequence[str]) -> str:
    """The data feed of stored bars of ``tickers`` at ``interval``: the sources the fetch manifest
    recorded for them (``data.sources.chunks.feed_label``)."""
    return feed_label(FetchManifest(home).sources(interval, tickers))


def universe_tickers(
    store: BarStore, interval: str, s: Mapping[str, Any], *, span: bool = False
) -> list[str]:
    """``tickers`` plus, with a ``universe``, its members on ``as_of`` (default: ``start_date``, else
    the first day of the first stored month) that the store holds (members without stored bars are
    skipped with a warning; an explicit ticker without bars stays an error). ``span``: the members
    of any day from that date to ``end_date`` (later joiners included)."""
    if not check_universe(s["universe"]):
        return list(s["tickers"])
    as_of = s["as_of"] or s["start_date"] or store.first_month(interval)
    if not as_of:
        raise DataError(
            f"universe {s['universe']}: the store holds no {interval} bars (run `podracer data fetch`)"
        )
    stored = set(store.tickers(interval))
    named = resolve_tickers("", None, list(s["tickers"]))
    candidates = members_between(as_of, s["end_date"]) if span else members(as_of)
    wanted = [t for t in candidates if t in stored]
    absent = [t for t in candidates if t not in stored]
    if absent and not span:  # a span's members come and go: most have no bars for most of it
        log.warning("universe %s on %s: %d member(s) have no stored bars: %s", s["universe"], as_of, len(absent),
                    ", ".join(absent))  # fmt: skip
    return list(dict.fromkeys([*wanted, *named]))


def with_membership(panel: Panel, named: Sequence[str] = ()) -> Panel:
    """``panel`` with ``member`` set from the index history by session (point in time): a universe
    member is tradable only while it is in the index; ``named`` tickers (the user's own ``tickers``,
    e.g. SPY beside the universe) are always members."""
    mask = membership_mask(panel.tickers, panel.grid.sessions)[panel.grid.session_id]
    keep = {normalize_ticker(t) for t in named}
    for a, ticker in enumerate(panel.tickers):
        if ticker in keep:
            mask[:, a] = True
    return dataclasses.replace(panel, member=mask)


def _home(home: str | os.PathLike[str] | None) -> Path:
    if home is not None:
        return Path(home)
    return Path(os.environ.get("PODRACER_HOME") or "./podracer-home")
