"""A walk-forward's promotions by the shadow book's rule (``[gate] rule = "book"``, the default).

The nightly shadow book (``app.nightly.shadow``) replayed over history, in the walk-forward's own run
folder: ``<run>/folds/fold-<k>/book.json`` is the book after fold ``k``'s decision, its policy copies
under ``<run>/shadow/policies/``. A replay never reads or writes the home's registry or book.

Fold by fold (:func:`fold_book`), before the fold's test window:

1. **entry**: the fold's challenger enters the book (``app.book_rule.enter``) after the last session its
   tournament read (the end of its validation window): when the book is full the oldest
   non-promising challenger retires, when every one is still promising it is not entered;
2. **sessions**: every challenger in the book, the champion in charge and buy-and-hold are replayed
   (``shadow.replay_returns``: the backtest engine with ``[env]``'s costs and execution, each policy
   from cash at the first session after it entered or took charge, on features normalized with its
   own statistics) on the sessions up to the end of the fold's gate window, and the book records the
   sessions it has not seen yet (``app.book_rule.record_sessions``): the gate window, then the embargo and
   test windows of the folds before as the folds advance. No recorded session lies on or after the
   fold's test window (checked), and none before a challenger's entry;
3. **decision**: ``app.book_rule.judge``: a challenger whose anytime-valid tests against what is in charge
   and against buy-and-hold both reject at its share of the level is promoted; else a champion whose
   edge is shown gone (or whose drawdown since promotion passed the limit) is demoted and the account
   goes back to ``[gate] before_champion``. Then ``app.book_rule.expire``.

**The level.** A walk-forward enters at most one challenger per fold, so all of them fall in the first
block of ``anytime.challenger_level``'s schedule when the block holds the planned folds
(:func:`book_settings`: ``per_block`` = the number of folds): each is tested at ``level / (2 K)``
for ``K`` folds, and the chance that any null challenger of the run is ever promoted stays at most
``level / 2``. The level and the book's knobs are ``[gate]``'s, read as nightly reads them
(``app.gate.shadow_settings``: ``[gate] level``, else ``[backtest] significance_level``).

Each fold's record holds the step (:class:`BookStep`): who entered, who retired, every challenger's
evidence, the promotion or demotion and its reason. The book is written atomically
(``data.artifact.Artifact``) before the fold's record, and a resumed run reads the book of the last
recorded fold back, so a kill at any point leaves a book that matches the folds recorded.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from app.book_rule import (
    BookDecision,
    RetiredChallenger,
    ShadowBook,
    ShadowSettings,
    demote_in_book,
    enter,
    expire,
    judge,
    promote_in_book,
    record_sessions,
)
from app.config import Config
from app.gate import shadow_settings
from app.nightly import shadow
from app.nightly.normalization import read_spec_file
from app.nightly.shadow import Replay, ReplayFn
from app.nightly.steps import ChallengerRun
from app.runs import RunDir
from app.walkforward.plan import FoldPlan
from app.walkforward.record import BookStep, ChallengerEvidence
from data.errors import PodracerError, one_line
from data.features import DEFAULT_WINDOWS, lookback
from data.market import MarketData

#: The book after a fold's decision, in the fold's folder.
BOOK_FILE = "book.json"


def book_settings(config: Config, planned_folds: int) -> ShadowSettings:
    """The book's rule for a walk-forward of ``planned_folds`` folds: nightly's
    (``app.gate.shadow_settings``), the level's first block holding the planned folds (see the module
    docstring)."""
    return shadow_settings(config, per_block=max(int(planned_folds), 1))


def challenger_name(index: int) -> str:
    """The book's name for fold ``index``'s challenger: its folder's name (``fold-<k>``)."""
    return f"fold-{int(index):03d}"


def fold_of(name: str) -> int:
    """The fold whose challenger the book calls ``name``."""
    return int(name.rsplit("-", 1)[1])


def book_file(run: RunDir, index: int) -> Path:
    """``folds/fold-<index>/book.json``: the book after fold ``index``'s decision."""
    return run.fold(index).path / BOOK_FILE


def book_before(run: RunDir, index: int) -> ShadowBook:
    """The book fold ``index`` starts from: the one fold ``index - 1`` wrote (empty before any)."""
    if index == 0:
        return ShadowBook()
    path = book_file(run, index - 1)
    return ShadowBook.read(path) if path.is_file() else ShadowBook()


def _history(market: MarketData, policy_dir: str | Path, after: str) -> MarketData:
    """``market``'s bars from enough before the first session after ``after`` for the policy's causal
    features (``data.features.lookback`` of its spec's windows): the replay's features are then those
    of the whole history, at a fraction of the cost."""
    spec = read_spec_file(Path(policy_dir)) or {}
    bars = lookback(spec.get("windows") or DEFAULT_WINDOWS)
    dates = market.session_dates()
    first = int(np.searchsorted(dates, np.datetime64(after, "D") + np.timedelta64(1, "D"), side="left"))
    return market.slice(max(0, first - bars), market.num_steps)


def record_through(
    config: Config,
    book: ShadowBook,
    market: MarketData,
    settings: ShadowSettings,
    *,
    replay: ReplayFn = shadow.replay_returns,
) -> tuple[ShadowBook, list[str]]:
    """The book with ``market``'s sessions it has not recorded yet (every challenger, the champion and
    buy-and-hold replayed), and the challengers that could not be replayed (retired)."""
    replays: dict[str, Replay | None] = {}
    broken = []
    for ch in book.challengers:
        try:
            replays[ch.run_id] = replay(
                config, _history(market, ch.policy_dir, ch.entered_after), ch.policy_dir, ch.entered_after
            )
        except PodracerError as err:  # its policy does not fit the market (tickers, features)
            broken.append(
                RetiredChallenger(
                    run_id=ch.run_id,
                    entry=ch.entry,
                    level=ch.level,
                    sessions=len(ch.dates),
                    why=f"cannot be replayed: {one_line(err)}",
                )
            )
    if broken:
        gone = {r.run_id for r in broken}
        book = book.model_copy(
            update={
                "challengers": [c for c in book.challengers if c.run_id not in gone],
                "retired": [*book.retired, *broken][-settings.keep_retired :],
                "retired_count": book.retired_count + len(broken),
            }
        )
    champion = book.champion
    champ_replay = (
        replay(
            config,
            _history(market, champion.policy_dir, champion.promoted_after),
            champion.policy_dir,
            champion.promoted_after,
        )
        if champion is not None
        else None
    )
    dates = sorted({d for r in [*replays.values(), champ_replay] if r is not None for d in r.dates})
    returns, benches = {}, {}
    for run_id, one in replays.items():
        returns[run_id], benches[run_id] = shadow.aligned(dates, one)
    champ_returns, champ_bench = shadow.aligned(dates, champ_replay)
    book = record_sessions(
        book,
        dates,
        returns,
        champ_returns if champion is not None else None,  # None: buy-and-hold is in charge
        [None] * len(dates),
        benchmarks=benches,
        champion_benchmark=champ_bench,
    )
    return book, [r.run_id for r in broken]


def _evidence(book: ShadowBook, decision: BookDecision) -> dict[str, ChallengerEvidence]:
    out = {}
    for ch in book.challengers:
        ev = decision.evidence[ch.run_id]
        e_charge, e_bench = ev.e_values
        out[ch.run_id] = ChallengerEvidence(
            entry=ch.entry,
            level=ch.level,
            sessions=ev.sessions,
            e_value_in_charge=e_charge,
            e_value_benchmark=e_bench,
            passes=ev.passes,
        )
    return out


def _check_no_lookahead(book: ShadowBook, plan: FoldPlan) -> None:
    first_test = plan.dates["test"][0]
    seen = [d for ch in book.challengers for d in ch.dates[-1:]]
    if book.champion is not None:
        seen += book.champion.dates[-1:]
    if any(d >= first_test for d in seen):
        raise PodracerError(f"fold {plan.fold.index}: the book recorded a session of its test window")


def fold_book(
    config: Config,
    run: RunDir,
    plan: FoldPlan,
    challenger: ChallengerRun,
    full: MarketData,
    settings: ShadowSettings,
    *,
    replay: ReplayFn = shadow.replay_returns,
) -> tuple[ShadowBook, BookStep]:
    """Fold ``plan``'s step of the book (see the module docstring): entry, the sessions through its
    gate window, the decision. ``full``: the walk-forward's loaded bars; ``replay`` replaces
    ``shadow.replay_returns`` (tests). Writes the book to the fold's folder and returns it with the
    step for the fold's record; the policy in charge is the book's champion."""
    index = plan.fold.index
    book = expire(book_before(run, index), settings)
    name = challenger_name(index)
    copy = shadow.keep_policy(run.path, name, Path(challenger.policy_dir), Path(challenger.run_dir))
    book, entered, leaving = enter(book, name, plan.dates["valid"][1], str(copy), settings)
    if not entered:
        shutil.rmtree(copy, ignore_errors=True)
    book, broken = record_through(config, book, full.slice(0, plan.bars["gate"][1]), settings, replay=replay)
    _check_no_lookahead(book, plan)
    last = [d for ch in book.challengers for d in ch.dates[-1:]]
    last += book.champion.dates[-1:] if book.champion is not None else []
    decision = judge(book, settings)
    evidence = _evidence(book, decision)
    promoted = demoted = None
    if decision.promote is not None:
        promoted = decision.promote.run_id
        book = promote_in_book(book, decision.promote)
    elif decision.demote is not None:
        demoted = decision.demote.run_id
        book = demote_in_book(book, decision.demote)
    expired = [c.run_id for c in book.challengers]
    book = expire(book, settings)
    expired = [r for r in expired if r not in {c.run_id for c in book.challengers}]
    book.write(book_file(run, index))
    step = BookStep(
        entered=name if entered else None,
        retired=[*(r.run_id for r in leaving), *broken, *expired],
        recorded_through=max(last) if last else None,
        promoted=promoted,
        demoted=demoted,
        champion=book.champion.run_id if book.champion is not None else None,
        reason=decision.reason
        if entered
        else f"{decision.reason}; the fold's challenger was not entered (the book is full of promising ones)",
        evidence=evidence,
    )
    return book, step
