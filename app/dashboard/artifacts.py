"""Read the artifacts other stages write, without Streamlit.

Every reader takes a path and returns the artifact's model (``metrics.json``: its
``backtests.metrics_model.MetricsDocument``) or plain data (DataFrames), or raises:
- ``ArtifactMissing``: the artifact has not been written yet; the page shows an empty state that
  says which command writes it;
- ``ArtifactCorrupt``: the file exists but cannot be read; the page shows an error naming the file.

The dashboard only ever reads: nothing here writes, locks or migrates a file. Other stages' stores
(tournament leaderboard, nightly registry, paper journal) are read through those stages' own read
helpers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agents.tournament import leaderboard as lb
from app.champion import Champion
from app.nightly import registry
from app.nightly.record import ChampionTimeline, champion_timeline
from app.paper import journal
from app.runs import RunDir, RunInfo, runs_root
from app.walkforward import record as fold_record
from app.walkforward.record import FoldRecord
from app.workflows.status import Status, gather_status
from backtests.metrics_model import MetricsDocument
from backtests.metrics_model import read_metrics as read_metrics_file
from data.errors import ArtifactError, PodracerError, one_line

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

# Columns each backtest parquet must carry (ARCHITECTURE.md, backtests/).
EQUITY_COLUMNS = ("timestamp",)
POSITIONS_COLUMNS = ("timestamp", "strategy", "ticker", "weight")
TRADES_COLUMNS = ("timestamp", "strategy", "ticker", "notional", "cost")
DAILY_COLUMNS = ("date",)
CURVE_STEP_COLUMN = "env_steps"


class ArtifactMissing(PodracerError):
    """An artifact not written yet: shown as an empty state, not as an error."""


class ArtifactCorrupt(PodracerError):
    """An artifact that exists but cannot be parsed."""


@dataclass(frozen=True)
class TournamentData:
    """The tournament's leaderboard store, as the tournament's read helpers return it."""

    leaderboard: pd.DataFrame  # top-K entries, best first
    events: pd.DataFrame  # the event log, oldest first
    pods: pd.DataFrame  # every pod tried, with its parent


# --------------------------------------------------------------------------- runs


def list_runs(home: Path) -> list[str]:
    """Run ids under ``<home>/runs``, newest first (by modification time, then name)."""
    root = runs_root(home)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if p.is_dir() and RUN_NAME.match(p.name)]
    runs.sort(key=lambda p: (-p.stat().st_mtime_ns, p.name))
    return [p.name for p in runs]


def run_path(home: Path, run: str) -> Path:
    """The directory of run ``run``; a name that could escape ``runs/`` is refused."""
    if not RUN_NAME.match(run or ""):
        raise ArtifactMissing(f"invalid run id {run!r}")
    path = RunDir(home, run).path
    if not path.is_dir():
        raise ArtifactMissing(f"no run {run!r} under {runs_root(home)}")
    return path


def read_run_info(run_dir: Path) -> RunInfo:
    """The run record (ids, seeds, windows, pods tried, champion); every field empty when absent."""
    try:
        return RunDir.at(run_dir).info()
    except PodracerError as err:
        raise ArtifactCorrupt(str(err)) from None


def read_fold_records(run_dir: Path) -> list[FoldRecord]:
    """A walk-forward's completed folds (``RunDir.fold_records``), in fold order."""
    run = RunDir.at(run_dir)
    if run.info().kind != "walkforward":
        raise ArtifactMissing(
            f"run {run_dir.name!r} is not a walk-forward: pick one in the sidebar, or start one with "
            "`podracer walkforward`"
        )
    try:
        return fold_record.read_fold_records(run)
    except PodracerError as err:
        raise ArtifactCorrupt(str(err)) from None


# --------------------------------------------------------------------------- backtest


def read_metrics(run_dir: Path) -> MetricsDocument:
    """``<run>/backtest/metrics.json``, validated by its model (``backtests.metrics_model``)."""
    path = RunDir.at(run_dir).backtest_metrics
    if not path.is_file():
        raise ArtifactMissing(f"no backtest yet: {_backtest_fix(run_dir)}")
    try:
        return read_metrics_file(path)
    except ArtifactError as err:
        raise ArtifactCorrupt(str(err)) from None


def read_equity(run_dir: Path) -> pd.DataFrame:
    """Equity in dollars: a UTC ``DatetimeIndex`` named timestamp, one float column per strategy."""
    run = RunDir.at(run_dir)
    frame = _read_parquet(run.backtest_equity, EQUITY_COLUMNS, run_dir, _backtest_fix(run_dir))
    frame["timestamp"] = _utc(frame["timestamp"])
    frame = frame.sort_values("timestamp").set_index("timestamp")
    return frame.astype("float64")


def read_positions(run_dir: Path) -> pd.DataFrame:
    """Long-format weights: ``timestamp, strategy, ticker, weight``."""
    run = RunDir.at(run_dir)
    frame = _read_parquet(run.backtest_positions, POSITIONS_COLUMNS, run_dir, _backtest_fix(run_dir))
    frame["timestamp"] = _utc(frame["timestamp"])
    frame = _plain_labels(frame, ("strategy", "ticker"))
    frame["weight"] = frame["weight"].astype("float64")
    return _by_time(frame)


def read_trades(run_dir: Path) -> pd.DataFrame:
    """Trades: ``timestamp, strategy, ticker, notional, cost``, oldest first."""
    run = RunDir.at(run_dir)
    frame = _read_parquet(run.backtest_trades, TRADES_COLUMNS, run_dir, _backtest_fix(run_dir))
    frame["timestamp"] = _utc(frame["timestamp"])
    frame = _plain_labels(frame, ("strategy", "ticker"))
    for col in ("notional", "cost"):
        frame[col] = frame[col].astype("float64")
    return _by_time(frame)


def read_daily_returns(run_dir: Path) -> pd.DataFrame:
    """Daily returns: a ``DatetimeIndex`` named date (naive, session dates), one column per strategy."""
    run = RunDir.at(run_dir)
    frame = _read_parquet(run.backtest_daily_returns, DAILY_COLUMNS, run_dir, _backtest_fix(run_dir))
    dates = pd.to_datetime(frame["date"])
    if getattr(dates.dt, "tz", None) is not None:
        dates = dates.dt.tz_convert("UTC").dt.tz_localize(None)
    frame["date"] = dates.dt.normalize()
    return frame.sort_values("date").set_index("date").astype("float64")


def tearsheet_path(run_dir: Path) -> Path | None:
    """``<run>/backtest/tearsheet.png`` if the backtest drew one."""
    path = RunDir.at(run_dir).backtest_tearsheet
    return path if path.is_file() else None


# --------------------------------------------------------------------------- training curves


def list_pods(run_dir: Path) -> list[str]:
    """Pods with a ``curve.parquet`` under ``<run>/pods/``, sorted by name."""
    run = RunDir.at(run_dir)
    if not run.pods.is_dir():
        return []
    return sorted(p.name for p in run.pods.iterdir() if run.curve(p.name).is_file())


def read_curves(run_dir: Path) -> dict[str, pd.DataFrame]:
    """Learning curves per pod (``env_steps`` plus metric columns), sorted by env steps."""
    pods = list_pods(run_dir)
    if not pods:
        raise ArtifactMissing(
            f"no training curves in run {Path(run_dir).name!r}: "
            "run `podracer train` (or `podracer train --tournament`)"
        )
    curves: dict[str, pd.DataFrame] = {}
    for pod in pods:
        frame = _read_parquet(RunDir.at(run_dir).curve(pod), (CURVE_STEP_COLUMN,), run_dir, "train the pod")
        curves[pod] = frame.sort_values(CURVE_STEP_COLUMN).reset_index(drop=True)
    return curves


# --------------------------------------------------------------------------- other stages


def read_tournament(run_dir: Path) -> TournamentData:
    """The run's leaderboard store via ``agents.tournament.leaderboard``'s read helpers."""
    board = RunDir.at(run_dir).leaderboard
    if not board.is_file():
        raise ArtifactMissing(
            f"no tournament in run {Path(run_dir).name!r}: "
            "run `podracer train --tournament` to train a population of pods"
        )
    try:
        return TournamentData(
            leaderboard=_frame(lb.read_leaderboard(run_dir)),
            events=_frame(lb.read_events(run_dir)),
            pods=_frame(lb.read_pods(run_dir)),
        )
    except PodracerError:
        raise
    except Exception as err:  # noqa: BLE001 - any reader failure becomes one line on the page
        raise ArtifactCorrupt(f"{board}: {one_line(err)}") from err


def read_nightly(home: Path) -> tuple[pd.DataFrame, Champion | None]:
    """Promotion decisions (oldest first) and the current champion, via ``app.nightly.registry``."""
    if not (Path(home) / "registry.sqlite").is_file():
        raise ArtifactMissing(
            "no nightly retrain yet: run `podracer retrain --config FILE` "
            "(or schedule it with `podracer schedule run`)"
        )
    try:
        decisions = _frame(registry.read_decisions(home))
        champion = registry.current_champion(home)
    except PodracerError:
        raise
    except Exception as err:  # noqa: BLE001 - any reader failure becomes one line on the page
        raise ArtifactCorrupt(f"{Path(home) / 'registry.sqlite'}: {one_line(err)}") from err
    return decisions, champion


def read_paper(home: Path) -> dict[str, pd.DataFrame]:
    """Paper-trading journal tables (orders, fills, positions, decisions, pnl) via ``app.paper.journal``."""
    if not (Path(home) / "paper" / "journal.sqlite").is_file():
        raise ArtifactMissing(
            "no paper trading yet: export a bundle (`podracer export RUN`) then run `podracer paper`"
        )
    try:
        tables = journal.read_journal(home)
    except PodracerError:
        raise
    except Exception as err:  # noqa: BLE001 - any reader failure becomes one line on the page
        raise ArtifactCorrupt(f"{Path(home) / 'paper' / 'journal.sqlite'}: {one_line(err)}") from err
    return {str(name): _frame(table) for name, table in dict(tables).items()}


def read_champion_timeline(home: Path) -> ChampionTimeline:
    """The champions and their paper records while in charge (``app.nightly.record``): the only
    out-of-sample figures of a nightly champion (the gate's test-window figures chose it)."""
    try:
        return champion_timeline(home)
    except PodracerError as err:
        return ChampionTimeline(note=one_line(err))
    except Exception as err:  # noqa: BLE001 - any reader failure becomes one line on the page
        raise ArtifactCorrupt(f"{Path(home) / 'paper' / 'journal.sqlite'}: {one_line(err)}") from err


def read_status(home: Path) -> Status:
    """``podracer status`` for the top of the Nightly page (``app.workflows.status``)."""
    return gather_status(home)


def paper_order_counts(tables: dict[str, pd.DataFrame]) -> dict[str, int]:
    """Orders by final status (``app.paper.journal.order_counts``), not rows of fills."""
    orders = tables.get("orders")
    if orders is None or orders.empty or "client_order_id" not in orders.columns:
        return {}
    return journal.order_counts(orders)


# --------------------------------------------------------------------------- helpers


def _backtest_fix(run_dir: Path) -> str:
    return f"run `podracer backtest {Path(run_dir).name}`"


def _read_parquet(path: Path, required: tuple[str, ...], run_dir: Path, fix: str) -> pd.DataFrame:
    """The parquet file at ``path``; missing -> ``ArtifactMissing`` that says ``fix`` (what writes it)."""
    if not path.is_file():
        raise ArtifactMissing(f"no {path.name} in run {Path(run_dir).name!r}: {fix}")
    try:
        frame = pd.read_parquet(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a torn file
        raise ArtifactCorrupt(f"{path} is corrupt: {one_line(err)}") from err
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ArtifactCorrupt(f"{path}: missing column(s) {', '.join(missing)}")
    return frame


def _utc(col: pd.Series) -> pd.Series:
    stamps = pd.to_datetime(col)
    if stamps.dt.tz is None:
        return stamps.dt.tz_localize("UTC")
    return stamps.dt.tz_convert("UTC")


def _by_time(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in time order (stable); the report already writes them so, then nothing is sorted."""
    if not frame["timestamp"].is_monotonic_increasing:
        frame = frame.sort_values("timestamp", kind="stable")
    return frame.reset_index(drop=True)


def _plain_labels(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """Categorical label columns (the report writes them so) as plain strings.

    Grouping or pivoting on a categorical would make a row or column for every category, also
    for strategies or tickers absent from the selection.
    """
    for col in columns:
        if isinstance(frame[col].dtype, pd.CategoricalDtype):
            # Index the categories by the codes: much faster than astype(str) on a million rows.
            codes = frame[col].cat.codes.to_numpy()
            labels = np.append(frame[col].cat.categories.astype(str).to_numpy(dtype=object), None)
            frame[col] = labels[codes]  # code -1 (missing) picks the trailing None
    return frame


def _frame(rows: Any) -> pd.DataFrame:
    """Accept what a read helper returns: a DataFrame, a list of dicts, or None."""
    if rows is None:
        return pd.DataFrame()
    if isinstance(rows, pd.DataFrame):
        return rows.copy()
    return pd.DataFrame(list(rows))
