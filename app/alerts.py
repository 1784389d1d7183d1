"""Problems that need a person, and the hook that tells one.

**The checks** (:data:`CHECKS`): every kind of problem ``podracer status`` reports, by name, with
what it means and what to do (docs/paper.md and docs/nightly.md list the same). A problem is a
:class:`Problem`: its ``check``, a one-line ``message``, and a ``key``, its identity across runs (the
check's name unless one check can report several things at once, e.g. ``raised:books``).

**Raised problems**: code that finds a problem outside ``status`` (the paper loop's reconciliation,
a systemd unit that failed) records it with :func:`raise_problem` and withdraws it with
:func:`clear_problem`; they sit in ``<home>/alerts/raised.json`` (atomic writes under a ``flock``)
until cleared, and ``status`` lists them with its own checks::

    from app.alerts import clear_problem, raise_problem
    raise_problem(home, "books", "AAPL: broker holds 5, the journal's fills imply 10")
    clear_problem(home, "books")

**The hook** (``[alerts]``: ``command``, run by ``sh -c`` with one problem as JSON on stdin,
and/or ``webhook``, an http(s) URL the same JSON is POSTed to; each with ``timeout_s``):
:func:`notify` compares the problems of now with ``<home>/alerts/state.json`` and sends each *new*
problem once (``"event": "problem"``) and each problem that is gone once (``"event": "clear"``).
A delivery that fails is retried at the next :func:`notify` (the state keeps what was delivered).
Payload: ``event``, ``key``, ``check``, ``message``, ``since`` (when first seen), ``home``, ``host``,
``at``. Every text goes through ``data.scrub`` first.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import tomllib
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.retrain_limits import MAX_MINUTES
from data.artifact import SCHEMA_KEY, Artifact
from data.errors import ArtifactError, ConfigError, PodracerError, one_line
from data.lock import ProcessLock
from data.scrub import scrub

#: Seconds an alert command or webhook may take before it counts as failed (retried next time).
HOOK_TIMEOUT_S = 10.0

#: name -> (what it means, what to do). The one list of what ``podracer status`` checks.
CHECKS: dict[str, tuple[str, str]] = {
    "home": (
        "the home is missing or unreadable",
        "check --home / PODRACER_HOME and the disk; restore the folder from a backup if it is gone",
    ),
    "registry": (
        "registry.sqlite cannot be read",
        "see the message (a writer holding it, a damaged file); restore it from a backup",
    ),
    "retrain_failed": (
        "the last retrain failed (the previous champion is still in charge)",
        "read the reason, fix it (keys, data, config) and run `podracer retrain` once by hand",
    ),
    "retrain_overdue": (
        "no retrain recorded since the schedule's last run time plus the budget and slack",
        "the scheduler did not run it: `systemctl --user list-timers` / `crontab -l`, and the log",
    ),
    "retrain_stuck": (
        "a retrain holds its lock past [nightly] max_minutes plus slack",
        "look at the holder named (pid); kill it if it hangs: the next run takes over the lock",
    ),
    "retrain_killed": (
        "a retrain died mid-run (its lock names a dead holder, or a nightly run folder is left running)",
        "find why (out of memory? a reboot?) in the log; the next retrain recovers the lock",
    ),
    "paper_stale": ("the paper loop wrote no heartbeat for two decision intervals", "restart the loop"),
    "paper_failing": (
        "the paper loop's last cycle failed (an error, no champion, a refused bundle)",
        "read the alert; fix it; the loop retries every cycle",
    ),
    "paper_halted": (
        "the paper loop sends no orders: daily-loss limit reached, or the broker blocked the account",
        "look at the day's P&L and the account; it resumes by itself in the next session",
    ),
    "heartbeat": ("the heartbeat file is unreadable", "the loop rewrites it each cycle; restart it"),
    "disk_full": (
        "the paper loop cannot write its heartbeat or books record: no space left (the last good copy stays)",
        "free space on the home's disk (`podracer prune`, the logs); it clears at the loop's next write",
    ),
    "journal": ("the paper journal cannot be read", "see the message; restore it from a backup"),
    "no_data": (
        "a whole session of paper cycles had no fresh bars",
        "check the market-data feed (keys, APCA_DATA_FEED, an outage)",
    ),
    "orders_rejected": (
        "every order the paper loop sent in a session was rejected",
        "read the rejections in the journal (buying power, asset status, account restrictions)",
    ),
    "books": (
        "the journal's positions do not reconcile with the broker's",
        "see docs/paper.md: reconcile (podracer reconcile) or accept the broker's book",
    ),
    "execution_gap": (
        "the broker's fills drift from the execution model past [paper] max_slippage_gap_bps",
        "see docs/paper.md: `podracer reconcile` shows the gap per day and order; recalibrate the costs",
    ),
    "gone": ("held tickers the broker will not trade", "close them by hand at the broker"),
    "unit_failed": ("a systemd unit of podracer failed", "journalctl --user -u <unit>"),
    "raised": ("a problem raised by a podracer process", "see the message"),
}


@dataclass(frozen=True)
class Problem:
    """One problem: ``check`` (a :data:`CHECKS` name), a one-line ``message``, and ``key``, its
    identity across runs (default: the check)."""

    check: str
    message: str
    key: str = ""

    def __post_init__(self) -> None:
        if self.check not in CHECKS:
            raise ValueError(f"unknown check {self.check!r}")
        object.__setattr__(self, "message", scrub(" ".join(str(self.message).split())))
        if not self.key:
            object.__setattr__(self, "key", self.check)

    def line(self) -> str:
        """``podracer status``' line for it."""
        return self.message


# --- settings -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AlertSettings:
    """What ``status`` needs of a config without loading it whole (``app.config`` loads torch):
    ``[alerts]`` and ``[nightly] max_minutes``. ``podracer schedule`` validates the file whole."""

    command: str = ""
    webhook: str = ""
    timeout_s: float = HOOK_TIMEOUT_S
    max_minutes: float | None = MAX_MINUTES

    @property
    def wired(self) -> bool:
        return bool(self.command or self.webhook)


def read_settings(config: str | os.PathLike[str] | None) -> AlertSettings:
    """``[alerts]`` and ``[nightly] max_minutes`` of a TOML config (defaults when ``config`` is
    None); one-line ConfigError when it is unreadable or a value has the wrong type."""
    if config is None:
        return AlertSettings()
    try:
        raw = tomllib.loads(Path(config).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{config}: unreadable ({one_line(err)})") from None
    alerts = raw.get("alerts") or {}
    nightly = raw.get("nightly") or {}
    out = AlertSettings(
        command=alerts.get("command", ""),
        webhook=alerts.get("webhook", ""),
        timeout_s=alerts.get("timeout_s", HOOK_TIMEOUT_S),
        max_minutes=nightly.get("max_minutes", MAX_MINUTES),
    )
    check_settings(out, str(config))
    return out


def check_settings(settings: AlertSettings, source: str = "[alerts]") -> None:
    """One-line ConfigError for a hook that could never work (the config loader calls it too)."""
    if not isinstance(settings.command, str) or not isinstance(settings.webhook, str):
        raise ConfigError(f"{source}: alerts.command and alerts.webhook are strings")
    if settings.webhook and not settings.webhook.startswith(("http://", "https://")):
        raise ConfigError(f"{source}: alerts.webhook must be an http:// or https:// URL")
    if not isinstance(settings.timeout_s, int | float) or settings.timeout_s <= 0:
        raise ConfigError(f"{source}: alerts.timeout_s must be a positive number of seconds")
    minutes = settings.max_minutes
    if minutes is not None and (not isinstance(minutes, int | float) or minutes <= 0):
        raise ConfigError(f"{source}: nightly.max_minutes must be a positive number of minutes")


# --- raised problems ------------------------------------------------------------------------------------
def alerts_dir(home: str | os.PathLike[str]) -> Path:
    """``<home>/alerts``: raised problems and what the hook was told."""
    return Path(home) / "alerts"


def state_dir(home: str | os.PathLike[str]) -> Path:
    """Where the hook's state lives: ``<home>/alerts``, or, while the home is missing (itself a
    problem to report, and a folder status must not create), a per-home folder under
    ``~/.cache/podracer/alerts``."""
    home = Path(home)
    return alerts_dir(home) if home.is_dir() else _missing_home_dir(home)


def _missing_home_dir(home: Path) -> Path:
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:16]
    return Path.home() / ".cache" / "podracer" / "alerts" / digest


def _locked(folder: Path) -> ProcessLock:
    # Short critical sections (read, change, atomic write): wait rather than fail.
    lock = ProcessLock(folder / "alerts.lock", command="podracer alerts")
    return lock.acquire(wait_s=30.0)


class AlertRow(BaseModel):
    """One problem in ``raised.json`` or ``state.json``: its check, its message and since when."""

    model_config = ConfigDict(extra="allow", frozen=True)

    check: str = "raised"
    message: str = ""
    since: str | None = None


class AlertRows(Artifact):
    """``<home>/alerts/raised.json`` and ``state.json``: the problems by key (``rows``). A file written
    before ``schema_version`` held the rows at its top level and reads as version 1."""

    FILE = "the alerts state"
    SCHEMA_VERSION = 1

    rows: dict[str, AlertRow] = Field(default_factory=dict, description="the problems by key")

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: Any) -> Any:
        if isinstance(data, dict) and "rows" not in data:
            rows = {k: v for k, v in data.items() if k != SCHEMA_KEY and isinstance(v, dict)}
            return {SCHEMA_KEY: data.get(SCHEMA_KEY, 1), "rows": rows}
        return data


def _read_json(path: Path) -> dict[str, Any]:
    """The rows of an alerts file as plain dicts ({} when there is none). A damaged file starts over
    (at worst one alert is sent again); one from a newer podracer is a one-line ``ArtifactError``."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}
    try:
        return {key: row.model_dump() for key, row in AlertRows.parse(raw, path).rows.items()}
    except ArtifactError:
        version = raw.get(SCHEMA_KEY) if isinstance(raw, dict) else None
        if isinstance(version, int) and version > AlertRows.SCHEMA_VERSION:
            raise
        return {}


def _write_json(path: Path, rows: dict[str, Any]) -> None:
    """Write the rows atomically (secrets masked: ``data.artifact.Artifact.write``)."""
    AlertRows.model_validate({"rows": rows}).write(path)


def raise_problem(home: str | os.PathLike[str], key: str, message: str, *, check: str = "raised") -> None:
    """Record a problem found outside ``status`` (see the module docstring) until
    :func:`clear_problem`; raising it again only updates its message."""
    problem = Problem(check, message, key)
    path = alerts_dir(home) / "raised.json"
    lock = _locked(alerts_dir(home))
    try:
        raised = _read_json(path)
        since = (raised.get(key) or {}).get("since") or _now()
        raised[key] = {"check": problem.check, "message": problem.message, "since": since}
        _write_json(path, raised)
    finally:
        lock.release()


def clear_problem(home: str | os.PathLike[str], key: str) -> bool:
    """Withdraw a raised problem; True if it was raised."""
    path = alerts_dir(home) / "raised.json"
    if not path.is_file():
        return False
    lock = _locked(alerts_dir(home))
    try:
        raised = _read_json(path)
        if key not in raised:
            return False
        del raised[key]
        _write_json(path, raised)
        return True
    finally:
        lock.release()


def raised_problems(home: str | os.PathLike[str]) -> list[tuple[Problem, str]]:
    """The raised problems with when each was first raised (ISO UTC), oldest first."""
    out = []
    for key, row in _read_json(alerts_dir(home) / "raised.json").items():
        if not isinstance(row, dict):
            continue
        check = row.get("check") if row.get("check") in CHECKS else "raised"
        out.append((Problem(check, str(row.get("message", "")), key), str(row.get("since", ""))))
    return sorted(out, key=lambda item: item[1])


# --- the hook -------------------------------------------------------------------------------------------
@dataclass
class NotifyReport:
    """What :func:`notify` sent: keys of new problems, of cleared ones, and of failed deliveries."""

    raised: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def deliver(payload: dict[str, Any], settings: AlertSettings) -> None:
    """Send one payload to the command and/or the webhook; PodracerError naming what failed."""
    body = scrub(json.dumps(payload, sort_keys=True))
    errors = []
    if settings.command:
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", settings.command],
                input=body + "\n",
                text=True,
                capture_output=True,
                timeout=settings.timeout_s,
                check=False,
            )
            if done.returncode != 0:
                said = (done.stderr or "").strip().splitlines()
                errors.append(
                    f"alerts.command exited {done.returncode}: {scrub(said[0][:200]) if said else ''}"
                )
        except (OSError, subprocess.TimeoutExpired) as err:
            errors.append(f"alerts.command: {one_line(err)}")
    if settings.webhook:
        request = urllib.request.Request(
            settings.webhook, data=body.encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=settings.timeout_s) as reply:  # noqa: S310 - http(s) checked
                reply.read()
        except (OSError, ValueError) as err:
            errors.append(f"alerts.webhook: {one_line(err)}")
    if errors:
        raise PodracerError("; ".join(errors))


def notify(
    home: str | os.PathLike[str],
    problems: Iterable[Problem],
    settings: AlertSettings,
    *,
    send: Callable[[dict[str, Any], AlertSettings], None] = deliver,
) -> NotifyReport:
    """Send each new problem once and each cleared one once (see the module docstring); the state
    in ``<home>/alerts/state.json`` is written atomically after the deliveries."""
    report = NotifyReport()
    if not settings.wired:
        return report
    home = Path(home)
    current = {p.key: p for p in problems}
    path = state_dir(home) / "state.json"
    lock = _locked(path.parent)
    try:
        state = _read_json(path)
        # The home is back: what was sent while it was missing is cleared from here.
        away = _missing_home_dir(home) / "state.json"
        if home.is_dir() and away.is_file():
            state = {**_read_json(away), **state}
        base = {"home": str(home), "host": socket.gethostname()}
        for key, problem in current.items():
            if key in state:
                continue
            payload = {
                "event": "problem",
                "key": key,
                "since": _now(),
                **asdict(problem),
                **base,
                "at": _now(),
            }
            try:
                send(payload, settings)
            except PodracerError:
                report.failed.append(key)
                continue
            state[key] = {"check": problem.check, "message": problem.message, "since": payload["since"]}
            report.raised.append(key)
        for key in [k for k in state if k not in current]:
            row = state[key] if isinstance(state[key], dict) else {}
            payload = {
                "event": "clear",
                "key": key,
                "check": row.get("check", "raised"),
                "message": f"cleared: {row.get('message', key)}",
                "since": row.get("since"),
                **base,
                "at": _now(),
            }
            try:
                send(payload, settings)
            except PodracerError:
                report.failed.append(key)
                continue
            del state[key]
            report.cleared.append(key)
        _write_json(path, state)
        if home.is_dir() and away.is_file():
            away.unlink()
    finally:
        lock.release()
    return report
