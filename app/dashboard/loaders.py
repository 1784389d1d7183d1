"""The dashboard's only Streamlit-cached module: artifact readers keyed on the files' signatures.

Each loader takes the path plus a signature (modification time and size of the files it reads),
so a cache entry is reused across reruns and sessions while the files are unchanged, and a new
backtest or a fresh leaderboard row shows up on the next rerun without a server restart. Readers
that raise (missing or corrupt artifacts) are not cached by Streamlit, so a fixed file is picked
up at once. (The signature parameter is deliberately not underscore-prefixed: Streamlit leaves
``_``-prefixed arguments out of the cache key.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app.champion import Champion
from app.dashboard import artifacts
from app.paper.sim_record import SimRecord, record_path
from app.runs import RunDir, RunInfo
from app.walkforward.record import FoldRecord
from backtests import looks
from backtests.metrics_model import MetricsDocument

# Entries kept per loader; a handful of runs is what a person flips between.
_MAX_ENTRIES = 16


def signature(*paths: Path) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime_ns, size) of each existing path; SQLite WAL side files included."""
    sig = []
    for path in paths:
        for candidate in (Path(path), Path(f"{path}-wal")):
            try:
                stat = candidate.stat()
            except OSError:
                continue
            sig.append((str(candidate), stat.st_mtime_ns, stat.st_size))
    return tuple(sig)


# --------------------------------------------------------------------------- runs


@st.cache_data(ttl=5, show_spinner=False)
def list_runs(home: str) -> list[str]:
    """Runs under the home, newest first; a short TTL so new runs appear without a restart."""
    return artifacts.list_runs(Path(home))


# --------------------------------------------------------------------------- backtest


# One cached reader for every backtest file: the name (of the file's RunDir property) picks the
# reader and is part of the key.
_BACKTEST_READERS = {
    "backtest_metrics": artifacts.read_metrics,
    "backtest_equity": artifacts.read_equity,
    "backtest_daily_returns": artifacts.read_daily_returns,
    "backtest_positions": artifacts.read_positions,
    "backtest_trades": artifacts.read_trades,
}


@st.cache_data(max_entries=_MAX_ENTRIES * len(_BACKTEST_READERS), show_spinner=False)
def _backtest_file(run_dir: str, name: str, sig: tuple) -> Any:
    return _BACKTEST_READERS[name](Path(run_dir))


def _backtest(run_dir: Path, name: str) -> Any:
    path = getattr(RunDir.at(run_dir), name)  # e.g. RunDir.backtest_metrics
    return _backtest_file(str(run_dir), name, signature(path))


def metrics(run_dir: Path) -> MetricsDocument:
    """``metrics.json`` of the run's backtest, its verdict stated with the looks the home's ledger
    counts now (``backtests.looks.restated``; cached until the file or the ledger changes)."""
    home = Path(run_dir).resolve().parents[1]  # <home>/runs/<run>
    path = RunDir.at(run_dir).backtest_metrics
    return _metrics(str(run_dir), str(home), signature(path, looks.ledger_path(home)))


@st.cache_data(max_entries=_MAX_ENTRIES, show_spinner=False)
def _metrics(run_dir: str, home: str, sig: tuple) -> MetricsDocument:
    return looks.restated(artifacts.read_metrics(Path(run_dir)), home)


def equity(run_dir: Path) -> pd.DataFrame:
    """Equity per strategy, UTC-indexed (cached until the file changes)."""
    return _backtest(run_dir, "backtest_equity")


def daily_returns(run_dir: Path) -> pd.DataFrame:
    """Daily returns per strategy (cached until the file changes)."""
    return _backtest(run_dir, "backtest_daily_returns")


def positions(run_dir: Path) -> pd.DataFrame:
    """Long-format weights (cached until the file changes)."""
    return _backtest(run_dir, "backtest_positions")


def trades(run_dir: Path) -> pd.DataFrame:
    """Trades with costs (cached until the file changes)."""
    return _backtest(run_dir, "backtest_trades")


# --------------------------------------------------------------------------- training / tournament


def curves(run_dir: Path) -> dict[str, pd.DataFrame]:
    """Learning curves per pod (cached until any pod's curve changes)."""
    run = RunDir.at(run_dir)
    files = [run.curve(pod) for pod in artifacts.list_pods(run_dir)]
    return _curves(str(run_dir), signature(*files))


@st.cache_data(max_entries=_MAX_ENTRIES, show_spinner=False)
def _curves(run_dir: str, sig: tuple) -> dict[str, pd.DataFrame]:
    return artifacts.read_curves(Path(run_dir))


def tournament(run_dir: Path) -> artifacts.TournamentData:
    """Leaderboard, events and pods of the run's tournament (cached until the store changes)."""
    return _tournament(str(run_dir), signature(RunDir.at(run_dir).leaderboard))


@st.cache_data(max_entries=_MAX_ENTRIES, show_spinner=False)
def _tournament(run_dir: str, sig: tuple) -> artifacts.TournamentData:
    return artifacts.read_tournament(Path(run_dir))


def run_info(run_dir: Path) -> RunInfo:
    """The run record (cached until the file changes)."""
    return _run_info(str(run_dir), signature(RunDir.at(run_dir).record))


@st.cache_data(max_entries=_MAX_ENTRIES, show_spinner=False)
def _run_info(run_dir: str, sig: tuple) -> RunInfo:
    return artifacts.read_run_info(Path(run_dir))


def fold_records(run_dir: Path) -> list[FoldRecord]:
    """A walk-forward's fold records (cached until the record or a fold record changes)."""
    run = RunDir.at(run_dir)
    return _fold_records(str(run_dir), signature(run.record, *run.fold_record_files()))


@st.cache_data(max_entries=_MAX_ENTRIES, show_spinner=False)
def _fold_records(run_dir: str, sig: tuple) -> list[FoldRecord]:
    return artifacts.read_fold_records(Path(run_dir))


# --------------------------------------------------------------------------- home-level stores


def nightly(home: Path) -> tuple[pd.DataFrame, Champion | None]:
    """Nightly decisions and the current champion (cached until the registry changes)."""
    return _nightly(str(home), signature(Path(home) / "registry.sqlite", Path(home) / "champion.json"))


@st.cache_data(max_entries=4, show_spinner=False)
def _nightly(home: str, sig: tuple) -> tuple[pd.DataFrame, Champion | None]:
    return artifacts.read_nightly(Path(home))


def champion_timeline(home: Path) -> Any:
    """The champions and their paper records (cached until registry or journal change, at most 10 s)."""
    home = Path(home)
    return _champion_timeline(
        str(home), signature(home / "registry.sqlite", home / "paper" / "journal.sqlite")
    )


@st.cache_data(max_entries=4, ttl=10, show_spinner=False)
def _champion_timeline(home: str, sig: tuple) -> Any:
    return artifacts.read_champion_timeline(Path(home))


# The status depends on the clock (a heartbeat goes stale by itself): a short TTL, no file signature.
@st.cache_data(max_entries=4, ttl=10, show_spinner=False)
def status(home: Path) -> Any:
    """``podracer status`` of the home (at most 10 s old)."""
    return artifacts.read_status(Path(home))


def paper(home: Path) -> dict[str, pd.DataFrame]:
    """Paper-trading journal tables (cached until the journal changes, at most 10 s)."""
    return _paper(str(home), signature(Path(home) / "paper" / "journal.sqlite"))


# The journal changes every decision interval during market hours: a short TTL on top of the
# file signature (the WAL may grow without the main file changing size).
@st.cache_data(max_entries=4, ttl=10, show_spinner=False)
def _paper(home: str, sig: tuple) -> dict[str, pd.DataFrame]:
    return artifacts.read_paper(Path(home))


def sim_record(home: Path) -> Any:
    """The paper-vs-simulator record (``app.paper.sim_record``; None before the first replay), cached
    until the file changes."""
    path = record_path(home)
    return _sim_record(str(path), signature(path))


@st.cache_data(max_entries=4, show_spinner=False)
def _sim_record(path: str, sig: tuple) -> Any:
    return SimRecord.read(path) if Path(path).is_file() else None
