"""The shadow book's rule (pure): challengers judged on the sessions that arrive after them, and a
champion that can lose its place. The nightly retrain (``app.nightly.shadow``: the store, the replays,
the night) and a walk-forward's folds (``app.walkforward.book``) both apply it.

Each night's challenger enters the book (``<home>/shadow/book.json``, :class:`ShadowBook`, with a copy
of its policy under ``<home>/shadow/policies/<run_id>/``). From then on every new session replays it,
the champion in charge and buy-and-hold through the backtest engine with the execution model (costs
on, no broker: :func:`replay_returns`), and the book keeps each challenger's net daily returns beside
those of what was in charge and of buy-and-hold on the same sessions. None of those sessions existed
when the challenger was trained or selected.

**Promotion** (:func:`judge`): a challenger is promoted when the anytime-valid tests of its daily
alpha (its excess over buy-and-hold net of a predictable beta: ``anytime.alpha_excess``, what the
verdict tests) over the alpha of what is in charge AND over buy-and-hold both reject at its share of
the level
(``backtests.anytime``: betting e-processes, valid whichever night the book stops; the ``k``-th
challenger ever entered is tested at ``anytime.challenger_level(level, k)``, so all of them together,
retired ones included, keep the chance that any challenger without alpha over buy-and-hold is ever
promoted at most the level). A challenger is judged against the champion in charge: when the
in-charge changes (a promotion, a demotion, a change by hand), each challenger's test against it
restarts on the sessions after the change (:func:`restart_against_in_charge`), so evidence against
an earlier champion never counts against the new one; its test against buy-and-hold goes on. The
bound against the in-charge holds per tenure: a challenger with alpha over buy-and-hold but none
over any champion gets one try at its share per change of in-charge.

**The bound** (:func:`enter`): at most ``slots`` challengers are tested at once. When the book is full
the oldest non-promising one retires to make room (tested for at least ``min_sessions`` sessions,
and its wealth against buy-and-hold or against what is in charge at or below 1: no evidence yet);
when every one is still promising tonight's challenger is not entered (and not counted). A challenger
tested for ``max_sessions`` sessions without passing retires too. Retired challengers keep their
share of the level spent (the entry count never decreases) and their last figures
(:class:`RetiredChallenger`, the newest ``keep_retired``).

**Demotion** (:func:`judge`): the champion's own record since its promotion (:class:`ChampionTenure`)
against buy-and-hold: when the demotion e-process rejects "it still earns ``demotion_margin`` a day
over buy-and-hold" (its alpha, as promotion reads it) at ``demotion_level``, or the drawdown since
promotion of its compounded alpha reaches ``max_drawdown``, the benchmark takes the account back:
a falling market alone demotes no champion that falls less.

The store is one versioned artifact written atomically (``data.artifact.Artifact``): a kill or a full
disk leaves the previous night's book whole, and a restart reads it back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from app.book_settings import ShadowSettings
from backtests import anytime
from data.artifact import Artifact, Figure

SHADOW_DIR = "shadow"
BOOK_FILE = "book.json"


class _Row(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class ShadowChallenger(_Row):
    """A challenger under test: its net daily returns on the sessions after its creation, beside
    those of what was in charge (the champion, or buy-and-hold before one) and of buy-and-hold."""

    run_id: str
    entry: int = Field(description="1-based: how many challengers were ever entered, this one included")
    level: float = Field(description="its share of the level (anytime.challenger_level)")
    entered_after: str = Field(description="the last session its run read (ISO date)")
    policy_dir: str = Field(description="the book's copy of its policy")
    dates: list[str] = Field(default_factory=list)
    returns: list[Figure] = Field(default_factory=list)
    in_charge: list[Figure] = Field(default_factory=list)
    benchmark: list[Figure] = Field(default_factory=list)
    charge_from: int = Field(
        0,
        ge=0,
        description="index of its first session under the in-charge now in charge (the test against "
        "the in-charge reads its record from there)",
    )


class RetiredChallenger(_Row):
    """A challenger that left the book without promotion, its share of the level spent."""

    run_id: str
    entry: int
    level: float
    sessions: int
    why: str
    log_wealth_in_charge: Figure = None
    log_wealth_benchmark: Figure = None


class ChampionTenure(_Row):
    """The champion in charge: its net daily returns and buy-and-hold's since its promotion."""

    run_id: str
    policy_dir: str
    promoted_after: str = Field(description="the last session before its record starts (ISO date)")
    dates: list[str] = Field(default_factory=list)
    returns: list[Figure] = Field(default_factory=list)
    benchmark: list[Figure] = Field(default_factory=list)


class ShadowBook(Artifact):
    """``<home>/shadow/book.json``: the challengers under test, the retired ones, and the champion's
    record since promotion."""

    SCHEMA_VERSION: ClassVar[int] = 1
    FILE: ClassVar[str] = f"{SHADOW_DIR}/{BOOK_FILE}"

    entries: int = Field(0, description="challengers ever entered (each holds a share of the level)")
    challengers: list[ShadowChallenger] = Field(default_factory=list)
    retired: list[RetiredChallenger] = Field(default_factory=list)
    retired_count: int = 0
    champion: ChampionTenure | None = None
    demoted: list[str] = Field(default_factory=list, description="why each champion was demoted")


# --- the rule (pure) ------------------------------------------------------------------------------


def _array(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def _peak(log_wealth: np.ndarray) -> float:
    return float(np.max(log_wealth)) if len(log_wealth) else 0.0


def _since_charge(challenger: ShadowChallenger) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Its returns, what was in charge and buy-and-hold on the sessions since the in-charge changed."""
    start = challenger.charge_from
    return (
        _array(challenger.returns[start:]),
        _array(challenger.in_charge[start:]),
        _array(challenger.benchmark[start:]),
    )


def _log_wealths(challenger: ShadowChallenger) -> tuple[np.ndarray, np.ndarray]:
    """The two log-wealth paths: its alpha over the in-charge's on the sessions since the in-charge took
    charge, and its alpha over buy-and-hold on its whole record."""
    r, charge, bench = _since_charge(challenger)
    against_charge = anytime.betting_log_wealth(anytime.alpha_difference(r, charge, bench))
    r_all, b_all = _array(challenger.returns), _array(challenger.benchmark)
    against_bench = anytime.betting_log_wealth(anytime.alpha_excess(r_all, b_all))
    return against_charge, against_bench


def evidence(challenger: ShadowChallenger) -> anytime.Evidence:
    """Where its two tests stand: the running maximum of each log-wealth (Ville's inequality bounds
    the supremum, so a crossing between two nights counts), its share of the level, its sessions. The
    test against the in-charge reads only the sessions since the in-charge took charge
    (:attr:`ShadowChallenger.charge_from`): evidence against an earlier champion never counts."""
    if not len(challenger.returns):  # entered on a night no session followed yet: no evidence
        return anytime.Evidence(0.0, 0.0, challenger.level, 0)
    charge, bench = _log_wealths(challenger)
    return anytime.Evidence(_peak(charge), _peak(bench), challenger.level, len(challenger.dates))


def _current(challenger: ShadowChallenger) -> tuple[float, float]:
    if not len(challenger.returns):
        return 0.0, 0.0
    charge, bench = _log_wealths(challenger)
    return (float(charge[-1]) if len(charge) else 0.0), float(bench[-1])


def restart_against_in_charge(book: ShadowBook) -> ShadowBook:
    """The book after the in-charge changed (a promotion, a demotion, a change by hand): every
    challenger's test against the in-charge restarts from its next session; its test against
    buy-and-hold goes on."""
    moved = [ch.model_copy(update={"charge_from": len(ch.dates)}) for ch in book.challengers]
    return book.model_copy(update={"challengers": moved})


def record_sessions(
    book: ShadowBook,
    dates: Sequence[str],
    challengers: Mapping[str, Sequence[float | None]],
    champion: Sequence[float | None] | None,
    benchmark: Sequence[float | None],
    *,
    benchmarks: Mapping[str, Sequence[float | None]] | None = None,
    champion_benchmark: Sequence[float | None] | None = None,
) -> ShadowBook:
    """The book with the sessions ``dates`` (ascending ISO dates, one value per date in every series)
    appended where they are new: for each challenger (``challengers[run_id]``) the dates after its
    entry and after its last recorded one, with buy-and-hold (``benchmarks[run_id]`` where given, else
    ``benchmark``) and what was in charge (``champion``; buy-and-hold itself when ``champion`` is
    None); the champion's record likewise (``champion_benchmark`` else ``benchmark``)."""
    benchmarks = benchmarks or {}
    updated = []
    for ch in book.challengers:
        series = challengers.get(ch.run_id)
        if series is None:
            updated.append(ch)
            continue
        bench = benchmarks.get(ch.run_id, benchmark)
        charge = bench if champion is None else champion
        last = ch.dates[-1] if ch.dates else ch.entered_after
        new = [i for i, d in enumerate(dates) if d > last and d > ch.entered_after]
        updated.append(
            ch.model_copy(
                update={
                    "dates": [*ch.dates, *(dates[i] for i in new)],
                    "returns": [*ch.returns, *(series[i] for i in new)],
                    "in_charge": [*ch.in_charge, *(charge[i] for i in new)],
                    "benchmark": [*ch.benchmark, *(bench[i] for i in new)],
                }
            )
        )
    record = book.champion
    if record is not None and champion is not None:
        bench = champion_benchmark if champion_benchmark is not None else benchmark
        last = record.dates[-1] if record.dates else record.promoted_after
        new = [i for i, d in enumerate(dates) if d > last]
        record = record.model_copy(
            update={
                "dates": [*record.dates, *(dates[i] for i in new)],
                "returns": [*record.returns, *(champion[i] for i in new)],
                "benchmark": [*record.benchmark, *(bench[i] for i in new)],
            }
        )
    return book.model_copy(update={"challengers": updated, "champion": record})


@dataclass(frozen=True)
class Demotion:
    """Why the champion loses its place."""

    run_id: str
    reason: str


@dataclass(frozen=True)
class BookDecision:
    """What tonight's book decides: the challenger to promote (or None), the champion's demotion (or
    None), and each challenger's evidence."""

    promote: ShadowChallenger | None
    demote: Demotion | None
    evidence: Mapping[str, anytime.Evidence]
    reason: str


def drawdown(returns: Sequence[float | None]) -> float:
    """Largest peak-to-trough fall of the wealth the returns compound to (0 for none; a fraction)."""
    r = np.nan_to_num(_array(returns), nan=0.0)
    if not len(r):
        return 0.0
    wealth = np.concatenate([[1.0], np.cumprod(1.0 + r)])
    return float(np.max(1.0 - wealth / np.maximum.accumulate(wealth)))


def judge(book: ShadowBook, settings: ShadowSettings = ShadowSettings()) -> BookDecision:
    """Tonight's decision on the book (see the module docstring). Of several challengers that pass,
    the one with the most evidence (the larger of the two log-wealths' minimum) is promoted. The
    champion's drawdown is that of its wealth over buy-and-hold's (``drawdown`` of the excess)."""
    found = {ch.run_id: evidence(ch) for ch in book.challengers}
    passing = [ch for ch in book.challengers if found[ch.run_id].passes]
    promote = None
    reason = "no challenger's tests passed"
    if passing:
        promote = max(
            passing,
            key=lambda c: min(found[c.run_id].log_wealth_champion, found[c.run_id].log_wealth_benchmark),
        )
        ev = found[promote.run_id]
        e_charge, e_bench = ev.e_values
        reason = (
            f"challenger {promote.run_id} (entry {promote.entry}) passed on {ev.sessions} sessions after "
            f"its creation: e-value {e_charge:.3g} against what was in charge and {e_bench:.3g} against "
            f"buy-and-hold, both at least {1 / ev.level:.3g} (its share {ev.level:.2g} of level "
            f"{settings.level:g})"
        )
    demote = None
    record = book.champion
    if promote is None and record is not None and record.dates:
        excess = anytime.alpha_excess(_array(record.returns), _array(record.benchmark))
        wealth = _peak(anytime.demotion_log_wealth(excess, settings.demotion_margin))
        fall = drawdown(excess)
        if wealth >= anytime.log_threshold(settings.demotion_level):
            demote = Demotion(
                record.run_id,
                f"champion {record.run_id}'s edge is gone: over {len(record.dates)} sessions since its "
                f"promotion the demotion test's e-value reached {math.exp(wealth):.3g} >= "
                f"{1 / settings.demotion_level:.3g} (mean excess over buy-and-hold below "
                f"{settings.demotion_margin:g}/day)",
            )
        elif fall >= settings.max_drawdown:
            demote = Demotion(
                record.run_id,
                f"champion {record.run_id}'s drawdown relative to buy-and-hold since its promotion is "
                f"{fall:.1%}, at or past the limit {settings.max_drawdown:.0%}",
            )
        if demote is not None:
            reason = demote.reason
    return BookDecision(promote, demote, found, reason)


def _retired(ch: ShadowChallenger, why: str) -> RetiredChallenger:
    charge, bench = _current(ch)
    return RetiredChallenger(
        run_id=ch.run_id,
        entry=ch.entry,
        level=ch.level,
        sessions=len(ch.dates),
        why=why,
        log_wealth_in_charge=charge,
        log_wealth_benchmark=bench,
    )


def _retire(book: ShadowBook, leaving: Sequence[RetiredChallenger], settings: ShadowSettings) -> ShadowBook:
    gone = {r.run_id for r in leaving}
    kept = [ch for ch in book.challengers if ch.run_id not in gone]
    history = [*book.retired, *leaving][-settings.keep_retired :]
    return book.model_copy(
        update={"challengers": kept, "retired": history, "retired_count": book.retired_count + len(leaving)}
    )


def promote_in_book(book: ShadowBook, promoted: ShadowChallenger) -> ShadowBook:
    """The book after ``promoted`` took charge: it leaves the challengers and starts the champion's
    record from its last tested session (the others keep testing, now against it)."""
    after = promoted.dates[-1] if promoted.dates else promoted.entered_after
    record = ChampionTenure(run_id=promoted.run_id, policy_dir=promoted.policy_dir, promoted_after=after)
    kept = [ch for ch in book.challengers if ch.run_id != promoted.run_id]
    return restart_against_in_charge(book.model_copy(update={"challengers": kept, "champion": record}))


def follow_champion(book: ShadowBook, run_id: str | None, policy_dir: str | None, after: str) -> ShadowBook:
    """The book's champion record for the champion the registry names: a new record (from ``after``)
    when it changed by any route; none when no champion is in charge."""
    if run_id is None:
        if book.champion is None:
            return book
        return restart_against_in_charge(book.model_copy(update={"champion": None}))
    if book.champion is not None and book.champion.run_id == run_id:
        return book
    record = ChampionTenure(run_id=run_id, policy_dir=str(policy_dir or ""), promoted_after=after)
    # A challenger put in charge by another route (by hand) leaves the challengers.
    kept = [ch for ch in book.challengers if ch.run_id != run_id]
    return restart_against_in_charge(book.model_copy(update={"champion": record, "challengers": kept}))


def demote_in_book(book: ShadowBook, demotion: Demotion) -> ShadowBook:
    """The book after the champion's demotion: buy-and-hold is in charge, the reason kept."""
    demoted = book.model_copy(update={"champion": None, "demoted": [*book.demoted, demotion.reason][-20:]})
    return restart_against_in_charge(demoted)


def expire(book: ShadowBook, settings: ShadowSettings = ShadowSettings()) -> ShadowBook:
    """The book without the challengers tested for ``max_sessions`` sessions (retired, counted)."""
    old = [
        _retired(ch, f"tested {len(ch.dates)} sessions without passing")
        for ch in book.challengers
        if len(ch.dates) >= settings.max_sessions
    ]
    return _retire(book, old, settings) if old else book


def promising(ch: ShadowChallenger, settings: ShadowSettings) -> bool:
    """Still worth its slot: tested for fewer than ``min_sessions`` sessions, or its wealth is above 1
    against buy-and-hold and, once it has ``min_sessions`` sessions under the in-charge now in charge,
    against that one too (a test restarted by a change of in-charge has no evidence yet, and none
    against it)."""
    if len(ch.dates) < settings.min_sessions:
        return True
    charge, bench = _current(ch)
    under_charge = len(ch.dates) - ch.charge_from
    return bench > 0.0 and (charge > 0.0 or under_charge < settings.min_sessions)


def enter(
    book: ShadowBook, run_id: str, after: str, policy_dir: str, settings: ShadowSettings = ShadowSettings()
) -> tuple[ShadowBook, bool, tuple[RetiredChallenger, ...]]:
    """Tonight's challenger into the book: ``(book, entered, retired)``. When the book is full, the
    oldest non-promising challenger retires to make room; when none is, nothing enters (and nothing is
    counted). A run already in the book is not entered twice."""
    if any(ch.run_id == run_id for ch in book.challengers):
        return book, False, ()
    leaving: tuple[RetiredChallenger, ...] = ()
    if len(book.challengers) >= settings.slots:
        spent = [ch for ch in book.challengers if not promising(ch, settings)]
        if not spent:
            return book, False, ()
        oldest = min(spent, key=lambda c: c.entry)
        leaving = (_retired(oldest, "book full: no evidence after the minimum sessions"),)
        book = _retire(book, leaving, settings)
    entry = book.entries + 1
    new = ShadowChallenger(
        run_id=run_id,
        entry=entry,
        level=anytime.challenger_level(settings.level, entry, settings.per_block),
        entered_after=after,
        policy_dir=policy_dir,
    )
    return book.model_copy(update={"entries": entry, "challengers": [*book.challengers, new]}), True, leaving
