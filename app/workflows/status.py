"""The state of the operating loop in one look: ``podracer status`` and the top of the Nightly page.

:func:`gather_status` reads, never writes: the registry's champion (and whether an operator put it
in charge by hand, with the reason), why none is (the last demotion), and the last retrain's decision
(``app.nightly.registry``, read-only; a change made by hand is not a retrain), the next retrain from
the cron schedule (``cron``/``tz`` when given, else the one ``podracer schedule run|print`` recorded
in ``<home>/schedule.json``, else the default; ``schedule["source"]`` says which), the paper loop's heartbeat
(``app.paper.heartbeat``: stale after two decision intervals of market hours), the kill-switch file,
the gone tickers the last cycle could not trade, and today's P&L (the journal's newest P&L row, when
it is from today's session).

``problems`` lists what needs the operator, one line each, and ``checks`` the same as
:class:`app.alerts.Problem` rows (check, key, message: what the alert hook sends); every check is named
in :data:`app.alerts.CHECKS`: a missing or unreadable home, an unreadable registry, the last retrain
failed, none since the schedule's last run time plus the budget and slack, a retrain holding its lock
past its budget or killed mid-run, a stale, failing or halted paper loop, a session of ``no_data``
cycles, a session whose orders were all rejected, books that do not reconcile with the broker
(``app.paper.books``' record), paper fills drifting from the execution model past the bound
(``app.paper.sim_record.gap_problem``), gone tickers, and problems raised through ``app.alerts``.
``podracer status`` exits 1 when there is any. The kill switch is a state the operator chose, shown
but not a problem. ``warnings`` lists what status could not read but worked around (an unreadable
schedule record: the default schedule is shown); they are not problems. Every text is scrubbed of
secrets (``data.scrub``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from app.alerts import AlertSettings, NotifyReport, Problem, notify, raised_problems, read_settings
from app.champion import Champion
from app.nightly.cron import DEFAULT_CRON, DEFAULT_TZ
from app.nightly.registry import current_champion, last_demotion, read_decisions
from app.nightly.schedule import cron_trigger, next_fire_times, read_schedule
from app.paper.books import read_record as read_book_record
from app.paper.heartbeat import STALE_INTERVALS, Heartbeat, read_heartbeat
from app.paper.journal import journal_path, latest_pnl, read_journal
from app.paper.outcomes import last_session_summary
from app.paper.sim_record import gap_problem
from app.paper.sim_record import read_record as read_sim_record
from app.paper.slippage import slippage_report
from app.timestamps import local_time
from app.workflows.retrain_checks import retrain_checks
from data.calendar import exchange_date
from data.errors import PodracerError, one_line
from data.scrub import scrub_all

RECENT_DECISIONS = 20  # decisions read: enough to count a run of failures
NO_DATA_CYCLES = 3  # cycles without fresh bars that make an open session a problem before it ends


@dataclass(frozen=True)
class ChampionStatus:
    """The champion in charge as ``podracer status`` shows it: the pointer's run, promotion time,
    bundle and decision, the ``bundle_id`` its bundle's manifest states, and who put it in charge
    (``source``: ``rule``, or ``manual`` with the operator's ``reason``: ``podracer promote``)."""

    run_id: str
    promoted_at: str | None
    bundle: str | None
    decision_id: int | None
    bundle_id: str | None
    source: str = "rule"
    reason: str | None = None  # the operator's, for a champion put in charge by hand

    @classmethod
    def of(cls, champion: Champion) -> ChampionStatus:
        return cls(
            run_id=champion.run_id,
            promoted_at=champion.promoted_at,
            bundle=champion.bundle,
            decision_id=champion.decision_id,
            bundle_id=_bundle_id(champion.bundle),
            source="manual" if champion.by_hand else "rule",
            reason=champion.info.reason if champion.by_hand else None,
        )


@dataclass(frozen=True)
class Status:
    """Everything ``podracer status`` shows (``to_dict``: its ``--json``)."""

    home: str
    now: str  # ISO UTC
    champion: ChampionStatus | None
    last_decision: dict[str, Any] | None  # the last retrain's: verdict, decided_at, reason, challenger_run_id
    next_retrain: str | None  # ISO, in the schedule's time zone
    schedule: dict[str, Any]  # cron, tz, source ("options" | "recorded" | "default"), the record's fields
    heartbeat: dict[str, Any] | None  # the heartbeat file's fields
    heartbeat_age_s: float | None
    loop: str  # "not started" | "ok" | "stale" | "failing"
    switch_pending: bool  # the champion's bundle is not the one the loop trades (next session's)
    kill_switch: dict[str, Any]  # path, on
    gone: list[str]  # held tickers the broker will not trade: manual attention
    today: dict[str, Any] | None  # session, pnl, return, equity (None: no P&L row today)
    problems: list[str] = field(default_factory=list)  # one line each
    checks: list[dict[str, str]] = field(default_factory=list)  # app.alerts.Problem rows of ``problems``
    warnings: list[str] = field(default_factory=list)  # read around, not problems (see the module)
    # per champion (bundle) that paper-traded: bundle_id, run_id, fills, realized_bps, model_bps
    slippage: list[dict[str, Any]] = field(default_factory=list)
    # no champion in charge because the last one was demoted: run_id, reason, demoted_at, session,
    # source ("manual": podracer demote)
    demotion: dict[str, Any] | None = None

    def problem_rows(self) -> list[Problem]:
        """``checks`` as :class:`app.alerts.Problem` (what the alert hook sends)."""
        return [Problem(row["check"], row["message"], row["key"]) for row in self.checks]

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "healthy": self.healthy}


def _bundle_id(bundle: str | None) -> str | None:
    """The ``bundle_id`` in a bundle's manifest (not verified: ``podracer paper`` does that)."""
    if not bundle:
        return None
    try:
        value = json.loads((Path(bundle) / "manifest.json").read_text(encoding="utf-8")).get("bundle_id")
    except (OSError, ValueError, AttributeError):
        return None
    return str(value) if value else None


def _registry(
    home: Path, problems: list[Problem]
) -> tuple[ChampionStatus | None, dict[str, Any] | None, list[dict[str, Any]]]:
    try:
        champion = current_champion(home, timeout=2.0)
        decisions = read_decisions(home, limit=RECENT_DECISIONS)
    except PodracerError as err:
        problems.append(Problem("registry", f"registry: {one_line(err)}"))
        return None, None, []
    # The retrains' record: a champion changed by hand (podracer promote / demote) is no retrain.
    retrains = [d for d in decisions if d.get("source") != "manual"]
    last = None
    if retrains:
        keys = ("id", "verdict", "decided_at", "reason", "challenger_run_id", "step")
        last = {k: retrains[-1].get(k) for k in keys}
    return (ChampionStatus.of(champion) if champion is not None else None), last, retrains


def _demotion(home: Path, champion: ChampionStatus | None) -> dict[str, Any] | None:
    """Why no champion is in charge: the registry's last demotion (None while a champion is in charge,
    or when none was ever demoted; an unreadable registry is reported by :func:`_registry`)."""
    if champion is not None:
        return None
    try:
        demoted = last_demotion(home)
    except PodracerError:
        return None
    return demoted.model_dump() if demoted is not None else None


def _paper_checks(home: Path, now: datetime, problems: list[Problem]) -> None:
    """The last session's cycles: all without fresh bars; every order sent rejected. The books."""
    try:
        summary = last_session_summary(home)
    except Exception as err:  # noqa: BLE001 - sqlite3 errors of a damaged journal: reported, not raised
        problems.append(Problem("journal", f"journal: {one_line(err)}"))
        summary = None
    if summary is not None:
        over = summary["session"] < exchange_date(now).date().isoformat()
        if summary["decisions"] == 0 and (
            (over and summary["no_data"] >= 1) or summary["no_data"] >= NO_DATA_CYCLES
        ):
            problems.append(
                Problem(
                    "no_data",
                    f"session {summary['session']}: no fresh bars in any of its {summary['no_data']} "
                    "paper cycle(s): nothing decided",
                )
            )
        if summary["sent"] and summary["rejected"] == summary["sent"]:
            problems.append(
                Problem(
                    "orders_rejected",
                    f"session {summary['session']}: all {summary['sent']} order(s) sent were rejected",
                )
            )
    try:
        gap = gap_problem(read_sim_record(home))
    except PodracerError as err:
        problems.append(Problem("execution_gap", f"sim_reconcile.json: {one_line(err)}"))
    else:
        if gap is not None:
            problems.append(Problem("execution_gap", gap))
    try:
        books = read_book_record(home)
    except PodracerError as err:
        problems.append(Problem("books", f"books: {one_line(err)}"))
        return
    if books is not None and not books.matched:
        problems.append(
            Problem("books", f"books do not reconcile with the broker since {books.since}: {books.message}")
        )


def _raised(home: Path, last: dict[str, Any] | None, beat: Heartbeat | None) -> list[Problem]:
    """Problems raised through ``app.alerts``, less a failed unit that has since run well (a later
    retrain that did not fail; a later healthy heartbeat of the paper loop)."""
    out = []
    for problem, since in raised_problems(home):
        if problem.check == "unit_failed" and since:
            unit = problem.key.split(":", 1)[-1]
            retrained = (
                "retrain" in unit
                and last is not None
                and last.get("verdict") != "failed"
                and str(last.get("decided_at") or "") > since
            )
            traded = "paper" in unit and beat is not None and beat.ok and beat.time > since
            if retrained or traded:
                continue
        out.append(problem)
    return out


def _today(home: Path, now: datetime, problems: list[Problem]) -> dict[str, Any] | None:
    try:
        row = latest_pnl(home)
    except Exception as err:  # noqa: BLE001 - sqlite3 errors of a damaged journal: reported, not raised
        problems.append(Problem("journal", f"journal: {one_line(err)}"))
        return None
    if row is None:
        return None
    session = exchange_date(now).date().isoformat()
    if exchange_date(pd.Timestamp(row["recorded_at"])).date().isoformat() != session:
        return None
    return {
        "session": session,
        "pnl": row.get("day_pnl"),
        "return": row.get("day_return"),
        "equity": row.get("equity"),
        "as_of": row["recorded_at"],
    }


def _slippage(home: Path) -> list[dict[str, Any]]:
    """Per champion, the paper fills' realized slippage against the execution model's prediction
    (``app.paper.slippage``); empty without a journal or a priced fill (a damaged journal is
    :func:`_today`'s problem)."""
    if not journal_path(home).is_file():
        return []
    try:
        tables = read_journal(home)
    except Exception:  # noqa: BLE001 - reported by _today, which reads the same journal
        return []
    runs = tables["sessions"].dropna(subset=["run_id"]).drop_duplicates("bundle_id", keep="last")
    run_of = dict(zip(runs["bundle_id"], runs["run_id"], strict=True))
    report = slippage_report(tables["orders"])
    return [
        {
            "bundle_id": str(row.bundle_id),
            "run_id": run_of.get(row.bundle_id),
            "fills": int(row.fills),
            "realized_bps": float(row.realized_bps),
            "model_bps": float(row.model_bps),
        }
        for row in report.itertuples(index=False)
    ]


def _schedule(home: Path, cron: str | None, tz: str | None, warnings: list[str]) -> dict[str, Any]:
    """The schedule the next retrain comes from: the options, else the recorded one, else the default."""
    if cron is not None or tz is not None:
        return {"cron": cron or DEFAULT_CRON, "tz": tz or DEFAULT_TZ, "source": "options"}
    default = {"cron": DEFAULT_CRON, "tz": DEFAULT_TZ, "source": "default"}
    try:
        record = read_schedule(home)
    except PodracerError as err:
        warnings.append(f"{one_line(err)}; the default schedule is shown")
        return default | {"unreadable": True}
    if record is None:
        return default
    return record.settings() | {"source": "recorded", "command": record.source}


def schedule_source(schedule: dict[str, Any]) -> str:
    """Where the schedule of the next retrain came from, in words (``podracer status``, the dashboard)."""
    source = schedule.get("source")
    if source == "recorded":
        return f"schedule from {schedule.get('command')}, {local_time(schedule.get('written_at'), schedule['tz'], '%Y-%m-%d')}"
    if source == "options":
        return "from --cron/--tz"
    if schedule.get("unreadable"):
        return "default schedule: the recorded one is unreadable"
    return "default schedule: none recorded"


def _settings(
    config: str | os.PathLike[str] | None, schedule: dict[str, Any], warnings: list[str]
) -> AlertSettings:
    """``[alerts]`` and the retrain budget of ``config``, else of the config the schedule records."""
    path = config if config is not None else schedule.get("config")
    try:
        return read_settings(path)
    except PodracerError as err:
        warnings.append(f"{one_line(err)}; the default budget is assumed")
        return AlertSettings()


def gather_status(
    home: str | os.PathLike[str],
    *,
    cron: str | None = None,
    tz: str | None = None,
    now: datetime | None = None,
    config: str | os.PathLike[str] | None = None,
) -> Status:
    """The operating loop's state (see the module docstring); ``now`` for tests.

    ``cron``/``tz``: the schedule of the next retrain (either given: the other is its default); neither:
    the one recorded in ``<home>/schedule.json``, else the default. ``config``: the TOML whose
    ``[nightly] max_minutes`` and ``[alerts]`` apply (default: the one the schedule records).
    """
    home = Path(home)
    now = now or datetime.now(UTC)
    problems: list[Problem] = []
    warnings: list[str] = []
    schedule = _schedule(home, cron, tz, warnings)
    schedule["described"] = schedule_source(schedule)
    upcoming = next_fire_times(cron_trigger(schedule["cron"], schedule["tz"]), now, 1)
    next_retrain = upcoming[0].isoformat() if upcoming else None
    if not home.is_dir() or not os.access(home, os.R_OK | os.X_OK):
        what = "does not exist" if not home.exists() else "is not a readable folder"
        problems.append(Problem("home", f"home {home} {what} (--home / PODRACER_HOME)"))
        return _status(home, now, problems, warnings, schedule=schedule, next_retrain=next_retrain)
    champion, last, decisions = _registry(home, problems)
    settings = _settings(config, schedule, warnings)
    retrain_checks(home, decisions, schedule, settings, now, problems)
    beat, loop, age, gone = _paper_loop(home, now, problems)
    kill_path = Path(beat.kill_switch) if beat is not None and beat.kill_switch else home / "paper" / "KILL"
    _paper_checks(home, now, problems)
    problems.extend(_raised(home, last, beat))
    pending = bool(
        champion
        and beat is not None
        and beat.mode == "champion"
        and beat.bundle_id is not None
        and champion.bundle_id != beat.bundle_id
    )
    today = _today(home, now, problems)
    return _status(
        home,
        now,
        problems,
        warnings,
        schedule=schedule,
        champion=champion,
        last_decision=last,
        next_retrain=next_retrain,
        heartbeat=beat.model_dump() if beat is not None else None,
        heartbeat_age_s=age,
        loop=loop,
        switch_pending=pending,
        kill_switch={"path": str(kill_path), "on": kill_path.exists()},
        gone=gone,
        today=today,
        slippage=_slippage(home),
        demotion=_demotion(home, champion),
    )


def _paper_loop(
    home: Path, now: datetime, problems: list[Problem]
) -> tuple[Heartbeat | None, str, float | None, list[str]]:
    """The paper loop as its heartbeat shows it: ``(heartbeat, loop state, its age in seconds, gone
    tickers)``, the loop's problems (stale, failing, halted, gone tickers) added to ``problems``."""
    try:
        beat: Heartbeat | None = read_heartbeat(home)
    except PodracerError as err:
        problems.append(Problem("heartbeat", one_line(err)))
        return None, "not started", None, []
    if beat is None:
        return None, "not started", None, []
    age = beat.age_s(now)
    gone = list(beat.attention)
    if beat.stale(now):
        loop = "stale"
        problems.append(
            Problem(
                "paper_stale",
                f"paper loop stale: last heartbeat {beat.time}, more than {STALE_INTERVALS} decision "
                f"intervals ({STALE_INTERVALS * beat.interval_s / 60:g} min) of market hours ago",
            )
        )
    elif not beat.ok:
        loop = "failing"
    elif beat.status == "halted":
        loop = "halted"
    else:
        loop = "ok"
    if not beat.ok:
        problems.append(
            Problem(
                "paper_failing", f"paper loop: {beat.status}: {beat.alert or '; '.join(beat.messages) or '?'}"
            )
        )
    elif beat.status == "halted":
        problems.append(Problem("paper_halted", f"paper loop halted: {'; '.join(beat.messages) or '?'}"))
    if gone:
        problems.append(Problem("gone", f"gone tickers need manual attention: {', '.join(gone)}"))
    return beat, loop, age, gone


def _status(home: Path, now: datetime, problems: list[Problem], warnings: list[str], **fields: Any) -> Status:
    """The :class:`Status`, its texts scrubbed, one problem per key (the first found)."""
    unique = list({p.key: p for p in reversed(problems)}.values())[::-1]
    defaults: dict[str, Any] = {
        "champion": None,
        "last_decision": None,
        "next_retrain": None,
        "heartbeat": None,
        "heartbeat_age_s": None,
        "loop": "not started",
        "switch_pending": False,
        "kill_switch": {"path": str(home / "paper" / "KILL"), "on": False},
        "gone": [],
        "today": None,
    }
    fields = {**defaults, **fields}
    return Status(
        home=str(home),
        now=now.isoformat(timespec="seconds"),
        **scrub_all(fields),
        problems=[p.message for p in unique],
        checks=[asdict(p) for p in unique],
        warnings=scrub_all(warnings),
    )


def check_and_notify(
    home: str | os.PathLike[str], *, config: str | os.PathLike[str] | None = None, **status_args: Any
) -> tuple[Status, NotifyReport]:
    """:func:`gather_status`, then each new problem and each cleared one to the ``[alerts]`` hook of
    ``config`` (default: the recorded schedule's): ``podracer status --notify`` and the end of
    every ``podracer retrain``."""
    state = gather_status(home, config=config, **status_args)
    settings = read_settings(config if config is not None else state.schedule.get("config"))
    return state, notify(home, state.problem_rows(), settings)
