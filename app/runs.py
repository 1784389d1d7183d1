"""The run folder: ``RunDir(home, run_id)`` names everything in ``<home>/runs/<run_id>/``.

A run folder holds ``config.toml`` (the resolved config), ``leaderboard.sqlite`` (a tournament's
store), ``pods/<pod>/`` (checkpoints and learning curves), ``champion/`` (the selected policy),
``backtest/`` (the report: ``metrics.json`` and its parquet files), ``looks.json`` (the looks it was
judged under) and the run record; a walk-forward
adds ``folds/fold-<k>/`` (each a run folder: the fold's tournament and ``fold.json``), and its
``backtest/`` is the stitched out-of-sample account. Every path in
it is a ``RunDir`` property or method, one per path, so no other app module spells a name of the run
folder (``tests/test_one_home.py``). The stages below the app that write into the folder (the
tournament in ``agents.tournament``, the report in ``backtests.report``) cannot import ``app``: they
name what they write themselves, and that test checks that it lands where ``RunDir`` reads it.

``RunDir`` is the only reader and writer of the run record; :class:`RunInfo` is its model (a versioned
``data.artifact.Artifact``: validated on read and on write, a newer schema version refused in one line).
Stages merge their own keys into the record (:meth:`RunDir.update`), so a nightly run carries the
tournament's keys and its own.

The champion's validation Sharpe is ``champion.sharpe_ratio`` (the empyrical name, as in the
backtest's metrics); records written before that rename kept a single run's under
``champion.metrics.sharpe``, which :meth:`RunInfo.from_dict` still reads.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator, with_config
from typing_extensions import TypedDict  # pydantic refuses typing.TypedDict before Python 3.12

from data.artifact import Artifact, Figure
from data.errors import ArtifactError, ConfigError, PodracerError

RUNS = "runs"
RECORD = "run.json"
CONFIG = "config.toml"
LEADERBOARD = "leaderboard.sqlite"
PODS = "pods"
CHAMPION = "champion"
#: The champion the tournament chose, kept when a refit replaced ``champion/`` (agents.tournament.refit).
CHAMPION_CHOSEN = "champion_chosen"
#: A fine-tuned champion's start, scored on the validation window by the refit: its returns (a trial).
CHAMPION_START = "champion_start"
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
#: The looks the run was judged under, per window (``backtests.looks_memory``).
LOOKS = "looks.json"
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def new_id(run: str | None, suffix: str) -> str:
    """``run`` checked as a run name, or a fresh id ``<UTC time>-<suffix>`` when None."""
    if run is None:
        return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{suffix}"
    if not RUN_NAME.match(run):
        raise ConfigError(f"--run {run!r}: use letters, digits, '.', '_' or '-' (at most 128)")
    return run


#: A JSON scalar: what the run record's flat blocks (hyper-parameters, validation figures, the
#: tournament's settings) hold.
Scalar = bool | int | float | str | None


@with_config(ConfigDict(extra="allow"))
class FeatureSpec(TypedDict, total=False):
    """``data.features``' feature spec (a dict wherever it travels): the features, their windows and
    the normalization statistics fitted on ``fitted_on``; keys of a newer writer are kept."""

    version: int
    names: list[str]
    windows: dict[str, int]
    ema_truncation: int
    lookback: int
    interval: str
    mean: list[float]
    std: list[float]
    clip: float
    fitted_on: list[str] | None


class RecordSection(BaseModel):
    """A block of the run record: typed keys, unknown keys kept."""

    model_config = ConfigDict(extra="allow", frozen=True)


class NightlyLabel(RecordSection):
    """``nightly``: what the retrain that made this run says of it."""

    warm_started_from: str | None = None  # the champion whose weights seeded the pool
    warm_start_pods: int | None = None
    eval_role: str | None = None  # "selection": its test-window figures chose or rejected it
    decision_id: int | None = None
    verdict: str | None = None  # "promoted" or "rejected"


class PodScore(RecordSection):
    """A pod and its validation score (an ensemble's member)."""

    pod_id: str | None = None
    score: Figure = None


class EnsembleInfo(RecordSection):
    """``ensemble``: the ensemble of the top pods, scored on the validation window like a pod."""

    pod_id: str | None = None
    kind: str | None = None
    size: int | None = None
    members: list[PodScore] = Field(default_factory=list)
    score: Figure = None
    sharpe_ratio: Figure = None
    metrics: dict[str, Scalar] = Field(default_factory=dict)
    checkpoint: str | None = None


class FoldLayout(RecordSection):
    """One fold of a walk-forward's layout: its index, sessions and window dates."""

    index: int | None = None
    sessions: dict[str, int | list[int] | None] = Field(default_factory=dict)
    windows: dict[str, list[str]] = Field(default_factory=dict)


class WalkForwardInfo(RecordSection):
    """``walkforward``: a walk-forward run's settings and layout, or a fold run's place in one."""

    settings: dict[str, Scalar] = Field(default_factory=dict)  # [walkforward] as run
    folds: list[FoldLayout] = Field(default_factory=list)
    run: str | None = None  # a fold's run: the walk-forward it belongs to
    fold: int | None = None
    warm_started_from: str | None = None


class ChampionInfo(BaseModel):
    """The run's selected policy: which pod, its validation score and Sharpe ratio."""

    model_config = ConfigDict(extra="allow", frozen=True, coerce_numbers_to_str=True)

    pod_id: str | None = None
    score: Figure = None
    sharpe_ratio: Figure = None
    generation: int | None = None
    env_steps: int | None = None
    hparams: dict[str, Scalar] = Field(default_factory=dict)
    source_checkpoint: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _older_forms(cls, value: Any) -> Any:
        """A bare pod id; ``id`` for ``pod_id``; a single run's ``metrics.sharpe`` (before the rename)."""
        if isinstance(value, str):
            return {"pod_id": value}
        if not isinstance(value, Mapping):
            return value
        out = dict(value)
        if out.get("pod_id") is None and out.get("id") is not None:
            out["pod_id"] = out.pop("id")
        if out.get("sharpe_ratio") is None and isinstance(out.get("metrics"), Mapping):
            out["sharpe_ratio"] = out["metrics"].get("sharpe")
        if out.get("hparams") is None:
            out.pop("hparams", None)
        return out


class RunInfo(Artifact):
    """The run record. Every key is optional: each stage writes its own, and hand-made records exist.

    Written by the training workflow (``kind`` single or tournament, start and end), by the
    tournament's status hook (running / interrupted / done, pods tried, trial Sharpes, champion)
    and by the nightly pipeline (``nightly``). Keys this class does not know are kept (:attr:`extra`).
    """

    FILE = "the run record"
    SCHEMA_VERSION = 1
    WRITE_SET_ONLY = True  # each stage writes its own keys: no nulls for the others
    model_config = ConfigDict(coerce_numbers_to_str=True)

    run_id: str | None = None
    kind: str | None = None  # "single", "tournament" or "walkforward"
    algo: str | None = None
    status: str | None = None  # running, interrupted, failed, done
    seed: int | None = None
    seeds: dict[str, int | None] = Field(default_factory=dict)
    windows: dict[str, tuple[str, str]] = Field(default_factory=dict)  # name -> (first, last date)
    tickers: tuple[str, ...] = ()
    feature_spec: FeatureSpec | None = None
    started: Figure = None
    updated: Figure = None
    finished: Figure = None
    error: str | None = None
    env_steps: int | None = None
    updates: int | None = None
    stopped_by_callback: bool | None = None
    pods_tried: int | None = None
    pods_failed: int | None = None
    trial_sharpes: tuple[Figure, ...] = ()  # null: a pod whose Sharpe is undefined (never 0)
    annualization: float | None = None  # the periods per year the run was trained with
    champion: ChampionInfo | None = None
    valid: dict[str, Scalar] = Field(default_factory=dict)  # a single run's last validation metrics
    tournament: dict[str, Scalar] = Field(default_factory=dict)  # the TournamentArgs of a tournament
    ensemble: EnsembleInfo = Field(default_factory=EnsembleInfo)  # the ensemble's validation figures
    nightly: NightlyLabel = Field(default_factory=NightlyLabel)
    walkforward: WalkForwardInfo = Field(default_factory=WalkForwardInfo)
    run_dir: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _lenient(cls, raw: Any) -> Any:
        """Nulls where a record may hold them, and windows that are not a (first, last) pair skipped."""
        if not isinstance(raw, Mapping):
            return raw
        out = {k: v for k, v in raw.items() if not (v is None and k in _EMPTY_WHEN_NULL)}
        if isinstance(out.get("windows"), Mapping):
            out["windows"] = {
                k: v for k, v in out["windows"].items() if isinstance(v, list | tuple) and len(v) == 2
            }
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], source: str | os.PathLike[str] = "run record") -> RunInfo:
        """The typed record; a key of the wrong type is a one-line error naming ``source``."""
        return cls.parse(dict(raw), source)

    @property
    def extra(self) -> dict[str, Any]:
        """The keys of the record this class does not declare (a stage's own, e.g. a walk-forward's
        ``peak_rss_mb``)."""
        return dict(self.model_extra or {})

    def trials(self) -> tuple[int, list[float]]:
        """Pods tried (at least 1) and their finite validation Sharpes."""
        return max(1, self.pods_tried or 1), [s for s in self.trial_sharpes if s is not None]


#: Record keys whose null means "none": read as their empty value.
_EMPTY_WHEN_NULL = frozenset(
    {
        "seeds",
        "windows",
        "tickers",
        "valid",
        "tournament",
        "ensemble",
        "nightly",
        "walkforward",
        "trial_sharpes",
    }
)


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
    def champion_chosen(self) -> Path:
        """The champion the tournament chose, when a refit replaced :attr:`champion` (else absent)."""
        return self.path / CHAMPION_CHOSEN

    @property
    def champion_start(self) -> Path:
        """The validation returns of a fine-tuned champion's start, when the refit scored it (else absent)."""
        return self.path / CHAMPION_START

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
    def remembered_looks(self) -> Path:
        """The looks the run was judged under (``looks.json``, ``backtests.looks_memory``): the count a
        fresh or another home's looks ledger cannot give."""
        return self.path / LOOKS

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

    def write_fold_record(self, index: int, record: Artifact) -> None:
        """Write the record of fold ``index`` (``app.walkforward.record.FoldRecord``; atomically: a
        fold is recorded whole or not at all). ``app.walkforward.record.read_fold_records`` reads them."""
        record.write(self.fold_record(index))

    def fold_record_files(self) -> list[Path]:
        """The record files of the completed folds (a fold still running has none)."""
        return sorted(self.folds.glob(f"fold-*/{FOLD_RECORD}")) if self.folds.is_dir() else []

    def exists(self) -> bool:
        return self.path.is_dir()

    def has_record(self) -> bool:
        return self.record.is_file()

    def _raw(self) -> dict[str, Any]:
        """The record's JSON object as written (``{}`` when there is none); unreadable -> one-line error."""
        path = self.record
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ArtifactError(f"{path} is corrupt: not valid JSON ({err})") from None
        except OSError as err:
            raise ArtifactError(f"{path}: cannot be read ({err.strerror or err})") from None
        if not isinstance(data, dict):
            raise ArtifactError(f"{path}: expected a JSON object, found {type(data).__name__}")
        return data

    def info(self) -> RunInfo:
        """The record, validated (every field empty when there is none); a malformed record or one from a
        newer schema version is a one-line :class:`data.errors.ArtifactError` naming the file."""
        return RunInfo.parse(self._raw(), self.record)

    def status(self) -> str | None:
        """The record's ``status``, or None when absent or unreadable (a failed run may be redone)."""
        try:
            return self.info().status
        except PodracerError:
            return None

    def write(self, data: Mapping[str, Any] | RunInfo) -> None:
        """Replace the record, validated, atomically (readers see the old or the new file, never half of
        one)."""
        info = data if isinstance(data, RunInfo) else RunInfo.parse(dict(data), self.record)
        info.write(self.record)

    def update(self, **fields: Any) -> None:
        """Merge ``fields`` into the record: a mapping merges one level deep into a mapping already
        there, anything else replaces the key. An unreadable record is replaced (it was written
        atomically, so it is a foreign file); one from a newer schema version is refused."""
        try:
            data = self._raw()
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
