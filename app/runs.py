"""The run folder: ``RunDir(home, run_id)`` names everything in ``<home>/runs/<run_id>/``.

A run folder holds ``config.toml`` (the resolved config), ``leaderboard.sqlite`` (a tournament's
store), ``pods/<pod>/`` (checkpoints and learning curves), ``champion/`` (the selected policy),
``backtest/`` (the report: ``metrics.json`` and its parquet files) and the run record; a walk-forward
adds ``folds/fold-<k>/`` (each a run folder: the fold's tournament and ``fold.json``), and its
``backtest/`` is the stitched out-of-sample account. Every path in
it is a ``RunDir`` property or method, one per path, so no other app module spells a name of the run
folder (``tests/test_one_home.py``). The stages below the app that write into the folder (the
tournament in ``agents.tournament``, the report in ``backtests.report``) cannot import ``app``: they
name what they write themselves, and that test checks that it lands where ``RunDir`` reads it.

``RunDir`` is the only reader and writer of the run record; :class:`RunInfo` is its typed view.
Stages merge their own keys into the record (:meth:`RunDir.update`), so a nightly run carries the
tournament's keys and its own.

The champion's validation Sharpe is ``champion.sharpe_ratio`` (the empyrical name, as in the
backtest's metrics); records written before that rename kept a single run's under
``champion.metrics.sharpe``, which :meth:`RunInfo.from_dict` still reads.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.atomic import atomic_write_json
from data.errors import ConfigError, PodracerError

RUNS = "runs"
RECORD = "run.json"
CONFIG = "config.toml"
LEADERBOARD = "leaderboard.sqlite"
PODS = "pods"
CHAMPION = "champion"
CURVE = "curve.parquet"  # a pod's learning curve, in its checkpoint folder
FEATURE_SPEC = "feature_spec.json"
BACKTEST = "backtest"
#: The backtest report's files (``backtests.report.write_report``), in ``backtest/``.
METRICS = "metrics.json"
EQUITY = "equity.parquet"
POSITIONS = "positions.parquet"
TRADES = "trades.parquet"
DAILY_RETURNS = "daily_returns.parquet"
TEARSHEET = "tearsheet.png"
#: A walk-forward's folds: ``folds/fold-<k>/``, each a tournament run folder with its fold record.
FOLDS = "folds"
FOLD_RECORD = "fold.json"
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def new_id(run: str | None, suffix: str) -> str:
    """``run`` checked as a run name, or a fresh id ``<UTC time>-<suffix>`` when None."""
    if run is None:
        return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{suffix}"
    if not RUN_NAME.match(run):
        raise ConfigError(f"--run {run!r}: use letters, digits, '.', '_' or '-' (at most 128)")
    return run


@dataclass(frozen=True)
class ChampionInfo:
    """The run's selected policy: which pod, its validation score and Sharpe ratio."""

    pod_id: str | None = None
    score: float | None = None
    sharpe_ratio: float | None = None
    generation: int | None = None
    env_steps: int | None = None
    hparams: dict[str, Any] = field(default_factory=dict)
    source_checkpoint: str | None = None

    @classmethod
    def from_value(cls, value: Any) -> ChampionInfo | None:
        if isinstance(value, str):
            return cls(pod_id=value)
        if not isinstance(value, Mapping):
            return None
        sharpe = value.get("sharpe_ratio")
        if sharpe is None and isinstance(value.get("metrics"), Mapping):
            sharpe = value["metrics"].get("sharpe")  # a single run's record before the rename
        pod = value.get("pod_id") if value.get("pod_id") is not None else value.get("id")
        hparams = value.get("hparams")
        return cls(
            pod_id=None if pod is None else str(pod),
            score=_float(value.get("score")),
            sharpe_ratio=_float(sharpe),
            generation=_int(value.get("generation")),
            env_steps=_int(value.get("env_steps")),
            hparams=dict(hparams) if isinstance(hparams, Mapping) else {},
            source_checkpoint=_str(value.get("source_checkpoint")),
        )


@dataclass(frozen=True)
class RunInfo:
    """The run record. Every key is optional: each stage writes its own, and hand-made records exist.

    Written by the training workflow (``kind`` single or tournament, start and end), by the
    tournament's status hook (running / interrupted / done, pods tried, trial Sharpes, champion)
    and by the nightly pipeline (``nightly``). Keys this class does not know are kept in ``extra``.
    """

    run_id: str | None = None
    kind: str | None = None  # "single", "tournament" or "walkforward"
    algo: str | None = None
    status: str | None = None  # running, interrupted, failed, done
    seed: int | None = None
    seeds: dict[str, Any] = field(default_factory=dict)
    windows: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (first, last date)
    tickers: tuple[str, ...] = ()
    feature_spec: dict[str, Any] | None = None
    started: float | None = None
    updated: float | None = None
    finished: float | None = None
    error: str | None = None
    env_steps: int | None = None
    updates: int | None = None
    stopped_by_callback: bool | None = None
    pods_tried: int | None = None
    pods_failed: int | None = None
    trial_sharpes: tuple[float, ...] = ()
    champion: ChampionInfo | None = None
    valid: dict[str, Any] = field(default_factory=dict)  # a single run's last validation metrics
    tournament: dict[str, Any] = field(default_factory=dict)  # the TournamentArgs of a tournament
    nightly: dict[str, Any] = field(default_factory=dict)
    walkforward: dict[str, Any] = field(default_factory=dict)  # a walk-forward's settings and layout
    run_dir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], source: str | os.PathLike[str] = "run record") -> RunInfo:
        """The typed record; a key of the wrong type is a one-line error naming ``source``."""
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        try:
            windows = {
                str(k): (str(v[0]), str(v[1]))
                for k, v in _mapping(raw.get("windows")).items()
                if isinstance(v, list | tuple) and len(v) == 2
            }
            return cls(
                run_id=_str(raw.get("run_id")),
                kind=_str(raw.get("kind")),
                algo=_str(raw.get("algo")),
                status=_str(raw.get("status")),
                seed=_int(raw.get("seed")),
                seeds=_mapping(raw.get("seeds")),
                windows=windows,
                tickers=tuple(str(t) for t in raw.get("tickers") or ()),
                feature_spec=dict(raw["feature_spec"])
                if isinstance(raw.get("feature_spec"), Mapping)
                else None,
                started=_float(raw.get("started")),
                updated=_float(raw.get("updated")),
                finished=_float(raw.get("finished")),
                error=_str(raw.get("error")),
                env_steps=_int(raw.get("env_steps")),
                updates=_int(raw.get("updates")),
                stopped_by_callback=None
                if raw.get("stopped_by_callback") is None
                else bool(raw["stopped_by_callback"]),
                pods_tried=_int(raw.get("pods_tried")),
                pods_failed=_int(raw.get("pods_failed")),
                trial_sharpes=tuple(float(s) for s in raw.get("trial_sharpes") or () if s is not None),
                champion=ChampionInfo.from_value(raw.get("champion")),
                valid=_mapping(raw.get("valid")),
                tournament=_mapping(raw.get("tournament")),
                nightly=_mapping(raw.get("nightly")),
                walkforward=_mapping(raw.get("walkforward")),
                run_dir=_str(raw.get("run_dir")),
                extra={k: v for k, v in raw.items() if k not in known},
            )
        except (TypeError, ValueError) as err:
            raise PodracerError(f"{source}: a key has the wrong type ({err})") from None

    def trials(self) -> tuple[int, list[float]]:
        """Pods tried (at least 1) and their finite validation Sharpes."""
        return max(1, self.pods_tried or 1), [s for s in self.trial_sharpes if math.isfinite(s)]


class RunDir:
    """The folder of run ``run_id`` under ``<home>/runs``; see the module docstring."""

    def __init__(self, home: str | os.PathLike[str], run_id: str) -> None:
        self.home = Path(home)
        self.run_id = run_id
        self.path = runs_root(home) / run_id

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> RunDir:
        """The run whose folder is ``path`` (``<home>/runs/<id>``, or any folder used as a run)."""
        path = Path(path)
        run = cls(path.parent.parent, path.name)
        run.path = path
        return run

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def config(self) -> Path:
        return self.path / CONFIG

    @property
    def leaderboard(self) -> Path:
        return self.path / LEADERBOARD

    @property
    def pods(self) -> Path:
        return self.path / PODS

    def pod(self, pod_id: str) -> Path:
        return self.pods / pod_id

    def curve(self, pod_id: str) -> Path:
        """The learning curve of pod ``pod_id`` (``pods/<pod>/curve.parquet``)."""
        return self.pod(pod_id) / CURVE

    def checkpoint(self, relative: str) -> Path:
        """A checkpoint folder given relative to the run, as the leaderboard stores it
        (``pods/<pod>``, or the ensemble's folder)."""
        return self.path / relative

    @property
    def champion(self) -> Path:
        return self.path / CHAMPION

    @property
    def feature_spec_file(self) -> Path:
        """A feature spec beside the record (read by export when the record has none)."""
        return self.path / FEATURE_SPEC

    @property
    def backtest(self) -> Path:
        return self.path / BACKTEST

    @property
    def backtest_metrics(self) -> Path:
        """The backtest report's figures (``backtest/metrics.json``)."""
        return self.backtest / METRICS

    @property
    def backtest_equity(self) -> Path:
        return self.backtest / EQUITY

    @property
    def backtest_positions(self) -> Path:
        return self.backtest / POSITIONS

    @property
    def backtest_trades(self) -> Path:
        return self.backtest / TRADES

    @property
    def backtest_daily_returns(self) -> Path:
        return self.backtest / DAILY_RETURNS

    @property
    def backtest_tearsheet(self) -> Path:
        return self.backtest / TEARSHEET

    @property
    def record(self) -> Path:
        """The run record's file (what :meth:`read` and :meth:`update` read and write)."""
        return self.path / RECORD

    # --- a walk-forward's folds (app.walkforward.run) ----------------------------------------
    @property
    def folds(self) -> Path:
        """``folds/``: one folder per fold of a walk-forward."""
        return self.path / FOLDS

    def fold(self, index: int) -> RunDir:
        """Fold ``index``'s folder ``folds/fold-<index>/``, a run folder of its own: the fold's
        tournament (leaderboard, pods, champion, record) and its :meth:`fold_record`."""
        return RunDir.at(self.folds / f"fold-{int(index):03d}")

    def fold_record(self, index: int) -> Path:
        """The record of a completed fold (``folds/fold-<index>/fold.json``), written once, atomically."""
        return self.fold(index).path / FOLD_RECORD

    def write_fold_record(self, index: int, data: Mapping[str, Any]) -> None:
        """Write the record of fold ``index`` (atomically: a fold is recorded whole or not at all)."""
        atomic_write_json(self.fold_record(index), dict(data))

    def fold_record_files(self) -> list[Path]:
        """The record files of the completed folds (a fold still running has none)."""
        return sorted(self.folds.glob(f"fold-*/{FOLD_RECORD}")) if self.folds.is_dir() else []

    def fold_records(self) -> list[dict[str, Any]]:
        """The records of the completed folds, in fold order."""
        out = []
        for path in self.fold_record_files():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
                raise PodracerError(f"{path}: not a fold record ({err})") from None
            if not isinstance(data, dict):
                raise PodracerError(f"{path}: expected a JSON object")
            out.append(data)
        return sorted(out, key=lambda d: int(d.get("index", 0)))

    def exists(self) -> bool:
        return self.path.is_dir()

    def has_record(self) -> bool:
        return self.record.is_file()

    def read(self) -> dict[str, Any]:
        """The record as written (``{}`` when there is none); unreadable -> one-line PodracerError."""
        path = self.record
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise PodracerError(f"{path}: not valid JSON ({err})") from None
        except OSError as err:
            raise PodracerError(f"{path}: cannot be read ({err.strerror or err})") from None
        if not isinstance(data, dict):
            raise PodracerError(f"{path}: expected a JSON object")
        return data

    def info(self) -> RunInfo:
        """The typed record (every field empty when there is none)."""
        return RunInfo.from_dict(self.read(), self.record)

    def status(self) -> str | None:
        """The record's ``status``, or None when absent or unreadable (a failed run may be redone)."""
        try:
            return self.read().get("status")
        except PodracerError:
            return None

    def write(self, data: Mapping[str, Any]) -> None:
        """Replace the record (atomically: readers see the old or the new file, never half of one)."""
        atomic_write_json(self.record, dict(data))

    def update(self, **fields: Any) -> None:
        """Merge ``fields`` into the record: a mapping merges one level deep into a mapping already
        there, anything else replaces the key. An unreadable record is replaced (it was written
        atomically, so it is a foreign file)."""
        try:
            data = self.read()
        except PodracerError:
            data = {}
        for key, value in fields.items():
            if isinstance(value, Mapping) and isinstance(data.get(key), Mapping):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        self.write(data)

    def on_status(self, fields: dict[str, Any]) -> None:
        """:meth:`update` as a callback (the tournament's ``on_status`` hook)."""
        self.update(**fields)


def runs_root(home: str | os.PathLike[str]) -> Path:
    """``<home>/runs``: the folder of every run."""
    return Path(home) / RUNS


def list_runs(home: str | os.PathLike[str]) -> list[RunDir]:
    """The runs under ``<home>/runs`` (folders with a valid run name), newest first by mtime."""
    root = runs_root(home)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and RUN_NAME.match(p.name)]
    found.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return [RunDir(home, p.name) for p in found]


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
