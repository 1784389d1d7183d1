"""The shadow book's night: its store, the replays of its policies and the night's orchestration.

The rule itself (who is entered, promoted, retired or demoted) is pure and lives in ``app.book_rule``,
which a walk-forward's folds apply too; its names are re-exported here. This module keeps
``<home>/shadow/book.json`` (one versioned artifact written atomically: a kill or a full disk leaves
the previous night's book whole), the book's copies of the policies under test
(``<home>/shadow/policies/<run_id>/``), the replays of every policy on the sessions new to the book
(:func:`replay_returns`: the backtest engine with ``[env]``'s costs and execution model, no broker),
and :func:`shadow_night` / :func:`book_decision`, the night as the retrain pipeline runs it.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents.ensemble import load_policy
from app.book_rule import (
    BOOK_FILE,
    SHADOW_DIR,
    BookDecision,
    ChampionTenure,
    Demotion,
    RetiredChallenger,
    ShadowBook,
    ShadowChallenger,
    ShadowSettings,
    _retire,
    _retired,
    demote_in_book,
    drawdown,
    enter,
    evidence,
    expire,
    follow_champion,
    judge,
    promising,
    promote_in_book,
    record_sessions,
    restart_against_in_charge,
)
from app.champion import Champion
from app.config import Config, to_env_params
from app.evaluation import check_policy_fits
from app.gate import PromotionDecision
from app.nightly.normalization import SPEC_FILE, read_spec_file, with_feature_spec, write_spec_file
from app.nightly.steps import ChallengerRun
from app.runs import RunDir
from backtests import engine
from data.atomic import replace_dir
from data.errors import PodracerError, one_line
from data.market import MarketData

__all__ = [
    "BookDecision",
    "ChampionTenure",
    "Demotion",
    "ReplayFn",
    "RetiredChallenger",
    "ShadowBook",
    "ShadowChallenger",
    "ShadowSettings",
    "demote_in_book",
    "drawdown",
    "enter",
    "evidence",
    "expire",
    "follow_champion",
    "judge",
    "promising",
    "promote_in_book",
    "record_sessions",
    "restart_against_in_charge",
]

log = logging.getLogger(__name__)

POLICIES_DIR = "policies"
BENCHMARK = "buy_and_hold"


def book_path(home: str | Path) -> Path:
    """``<home>/shadow/book.json``."""
    return Path(home) / SHADOW_DIR / BOOK_FILE


def read_book(home: str | Path) -> ShadowBook:
    """The book, or an empty one when the home has none yet (a malformed file is a one-line error)."""
    path = book_path(home)
    return ShadowBook.read(path) if path.exists() else ShadowBook()


def write_book(home: str | Path, book: ShadowBook) -> Path:
    """Write the book atomically (the previous one stays whole on a failure)."""
    path = book_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    book.write(path)
    return path


# --- the night (I/O) ------------------------------------------------------------------------------


def policy_copy_dir(home: str | Path, run_id: str) -> Path:
    """``<home>/shadow/policies/<run_id>``: the book's copy of a challenger's policy."""
    return Path(home) / SHADOW_DIR / POLICIES_DIR / run_id


def keep_policy(home: str | Path, run_id: str, policy_dir: Path, run_dir: Path | None = None) -> Path:
    """Copy a challenger's policy folder into the book (a whole-folder swap), with the feature spec
    its run was trained with: the run folder may be pruned while the challenger is tested."""
    target = policy_copy_dir(home, run_id)
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(policy_dir, staging)
    if run_dir is not None and not (staging / SPEC_FILE).exists():
        try:
            spec = RunDir.at(run_dir).info().feature_spec
        except PodracerError:
            spec = None
        if spec:
            write_spec_file(staging, spec)
    return replace_dir(staging, target)


@dataclass(frozen=True)
class Replay:
    """One policy replayed from the first session after ``after``: session dates and the net daily
    returns of the policy and of buy-and-hold bought on the same first bar."""

    dates: tuple[str, ...]
    returns: tuple[float, ...]
    benchmark: tuple[float, ...]


def replay_returns(config: Config, full: MarketData, policy_dir: str | Path, after: str) -> Replay | None:
    """Replay the policy at ``policy_dir`` on ``full``'s sessions after ``after`` (from cash at the
    first one; its own feature normalization where its folder records it), through the backtest
    engine with ``[env]``'s costs and execution; None when no session follows ``after``."""
    dates = full.session_dates()
    first = np.datetime64(after, "D") + np.timedelta64(1, "D")
    if not len(dates) or dates[-1] < first:
        return None
    window = full.window(str(first), None)
    policy_dir = Path(policy_dir)
    spec = read_spec_file(policy_dir)
    if spec is not None:
        window = with_feature_spec(full, window, spec)
    params = to_env_params(config.env)
    device = config.agent.device
    policy = load_policy(policy_dir, device=device)
    check_policy_fits(policy, window, params)
    result = engine.run_backtest(
        window, params, {"policy": policy}, baselines=(BENCHMARK,), device=device, compile="off"
    )
    days, returns = result.daily_returns()
    r = returns.detach().cpu().numpy()
    return Replay(
        tuple(str(np.datetime64(d, "D")) for d in days),
        tuple(float(v) for v in r[:, result.index("policy")]),
        tuple(float(v) for v in r[:, result.index(BENCHMARK)]),
    )


#: A replay of one policy (:func:`replay_returns`, or a test's stand-in): the shadow book's one seam,
#: which nightly and a walk-forward's book (``app.walkforward.book``) both call.
ReplayFn = Callable[[Config, MarketData, str | Path, str], Replay | None]


@dataclass(frozen=True)
class ShadowNight:
    """What the book did tonight: the promotion (run id and the book's policy copy) or None, the
    demotion or None, whether tonight's challenger entered, who retired, and the reason line."""

    promote: str | None
    promote_policy: str | None
    demote: Demotion | None
    entered: bool
    retired: tuple[str, ...]
    reason: str
    book: ShadowBook


def aligned(dates: Sequence[str], replay: Replay | None) -> tuple[list[float | None], list[float | None]]:
    """A replay's returns and buy-and-hold's on ``dates`` (None where it has no such session)."""
    if replay is None:
        return [None] * len(dates), [None] * len(dates)
    by_date = dict(zip(replay.dates, zip(replay.returns, replay.benchmark, strict=True), strict=True))
    rows = [by_date.get(d) for d in dates]
    return [r[0] if r else None for r in rows], [r[1] if r else None for r in rows]


def shadow_night(
    config: Config,
    home: str | Path,
    full: MarketData,
    challenger: ChallengerRun,
    champion: Champion | None,
    settings: ShadowSettings = ShadowSettings(),
    *,
    replay: ReplayFn | None = None,
    write: bool = True,
) -> ShadowNight:
    """One night of the book: replay every challenger under test and the champion in charge on the
    sessions of ``full`` (the loaded market) that are new to the book, judge, apply a promotion or a
    demotion to the book, enter tonight's ``challenger`` (a ``ChallengerRun``: it is tested from the
    first session after ``full``'s last), and write the book (with ``write``; else the caller writes it
    by :func:`commit_night`). The registry is the caller's: it acts on :attr:`ShadowNight.promote` /
    :attr:`ShadowNight.demote`. ``replay`` replaces :func:`replay_returns` (tests)."""
    replay = replay or replay_returns
    book = read_book(home)
    last = str(full.session_dates()[-1]) if full.num_steps else ""
    champ_id = champion.run_id if champion else None
    champ_dir = str(champion.policy_dir) if champion else None
    book = follow_champion(book, champ_id, champ_dir, last)
    replays: dict[str, Replay | None] = {}
    broken: list[RetiredChallenger] = []
    for ch in book.challengers:
        try:
            replays[ch.run_id] = replay(config, full, ch.policy_dir, ch.entered_after)
        except PodracerError as err:  # its policy no longer fits the market (tickers, features)
            broken.append(_retired(ch, f"cannot be replayed: {one_line(err)}"))
    if broken:
        book = _retire(book, broken, settings)
    champ_replay = (
        replay(config, full, book.champion.policy_dir, book.champion.promoted_after)
        if book.champion is not None
        else None
    )
    dates = sorted({d for r in [*replays.values(), champ_replay] if r is not None for d in r.dates})
    returns, benches = {}, {}
    for run_id, replay in replays.items():
        returns[run_id], benches[run_id] = aligned(dates, replay)
    champ_returns, champ_bench = aligned(dates, champ_replay)
    # No champion: buy-and-hold is in charge, each challenger's own from its first session.
    book = record_sessions(
        book,
        dates,
        returns,
        champ_returns if book.champion is not None else None,
        [None] * len(dates),
        benchmarks=benches,
        champion_benchmark=champ_bench,
    )
    decision = judge(book, settings)
    promote = promote_policy = None
    if decision.promote is not None:
        promote, promote_policy = decision.promote.run_id, decision.promote.policy_dir
        book = promote_in_book(book, decision.promote)
    elif decision.demote is not None:
        book = demote_in_book(book, decision.demote)
    book = expire(book, settings)
    copy = keep_policy(home, challenger.run_id, Path(challenger.policy_dir), Path(challenger.run_dir))
    book, entered, entering_retired = enter(book, challenger.run_id, last, str(copy), settings)
    leaving = (*broken, *entering_retired)
    if not entered:
        shutil.rmtree(copy, ignore_errors=True)
    night = ShadowNight(
        promote,
        promote_policy,
        decision.demote,
        entered,
        tuple(r.run_id for r in leaving),
        decision.reason,
        book,
    )
    if write:
        commit_night(home, night)
    return night


def commit_night(home: str | Path, night: ShadowNight) -> None:
    """Write the night's book (atomically) and drop the policy copies of challengers that left it
    (and of a champion it no longer follows). The retrain calls it only after the registry has
    committed the night's decision: a night that fails before leaves the book as it was, and the
    next night replays its sessions again (a book promotion is never lost from the book while the
    registry never saw it)."""
    book = night.book
    write_book(home, book)
    kept = {c.run_id for c in book.challengers} | ({book.champion.run_id} if book.champion else set())
    copies = Path(home) / SHADOW_DIR / POLICIES_DIR
    for folder in copies.iterdir() if copies.is_dir() else ():
        if folder.name not in kept and not folder.name.startswith("."):
            shutil.rmtree(folder, ignore_errors=True)


def book_decision(
    config: Config,
    home: str | Path,
    full: MarketData,
    challenger: ChallengerRun,
    champion: Champion | None,
    settings: ShadowSettings = ShadowSettings(),
) -> tuple[PromotionDecision, ChallengerRun, ShadowNight]:
    """The book's night as the pipeline's decision: ``(promotion, the run promoted or tonight's
    challenger, the night)``. A promoted run is an earlier night's challenger: its run folder (kept
    from pruning while it is in the book: ``app.retention.protected``) and the book's policy copy. The
    book is not written: the caller commits the night (:func:`commit_night`) after the registry."""
    night = shadow_night(config, home, full, challenger, champion, settings, write=False)
    if night.promote is not None and night.promote_policy is not None:
        promoted = ChallengerRun(
            run_id=night.promote,
            run_dir=RunDir(Path(home), night.promote).path,
            policy_dir=Path(night.promote_policy),
            num_trials=0,
        )
        return PromotionDecision(True, f"shadow book: {night.reason}"), promoted, night
    entered = (
        "entered the shadow book" if night.entered else "not entered (the book is full of promising ones)"
    )
    why = night.demote.reason if night.demote is not None else night.reason
    return PromotionDecision(False, f"shadow book: {why}; tonight's challenger {entered}"), challenger, night
