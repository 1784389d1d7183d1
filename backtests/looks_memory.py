"""The looks a run was judged under, remembered in its own folder (``<run>/looks.json``).

The looks ledger (``backtests.looks``, ``<home>/looks.sqlite``) counts every look at a held-out window,
but it is one file of one home: deleted, rebuilt, or left behind when a run folder is copied to another
home, a fresh ledger counts a run judged after many looks as "1 look". So each run also remembers, per
window it was judged on (the market, the ticker set and the window's first and last session), the
largest count of looks it was judged under, the per-day Sharpe ratios of those looks (what the
hurdle reads), the identity of the ledger that counted them, and its own looks there (strategy and
policy digest, with the count each was first judged with).

When a run is judged again (:func:`combine`), the count used is the larger of the ledger's and the
remembered one:

- the ledger that counted the remembered looks is the one in use, and nothing was lost before: the
  ledger holds every remembered look and more, so its count stands, exact;
- otherwise (the ledger was deleted or rebuilt, the run is judged from another home, rows were
  deleted, or a reset happened before and the count was already a lower bound): the larger of the
  two counts is used, plus this look when it is new to the remembered ones (a new policy, another
  result), and the count is marked a **lower bound** (``lost``). The looks taken since the reset
  elsewhere in the old ledger, or at the old ledger after the copy, cannot be known, nor which of the
  new ledger's looks repeat remembered ones: the report reads "looks unknown (at least N ...)", the
  verdict computed with N. A lower bound stays one: once a ledger that counted looks at a window is
  gone, no later count at that window is complete.

A run judged before this file existed seeds its memory from its last report (``backtest/metrics.json``:
its ``oos_test.look`` key, ledger and ``looks``; :func:`from_report`). The report keeps the count and
the variance of the looks' Sharpe ratios, not the ratios: the seeded list reproduces both (the hurdle
reads nothing else), so a look added to it later is deflated from an approximate spread.

The file is a versioned artifact (``data.artifact``): written atomically, a malformed one is a one-line
error naming it. Two judgements of one run at once may each write their own window's entry; the last
write wins (the ledger, which both write, keeps its own count).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backtests.looks import Look, LookCount, record_look
from backtests.metrics_model import MetricsDocument
from data.artifact import Artifact, Figure
from data.errors import PodracerError, one_line

log = logging.getLogger(__name__)


class JudgedLook(BaseModel):
    """One of the run's own looks at a window: the run's name, the strategy, the look key's policy
    digest (the ledger's key less the window) and the count it was first judged with."""

    model_config = ConfigDict(extra="allow", frozen=True)

    run_id: str
    strategy: str
    policy: str = ""
    first: int = Field(ge=1, description="the looks counted when it was first judged")


class RememberedWindow(BaseModel):
    """The looks at one window of one market the run was judged under (see the module docstring)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    market: str
    tickers: list[str] = Field(default_factory=list)  # sorted
    start: str
    end: str
    looks: int = Field(ge=1, description="the largest count of looks seen at this window")
    sharpes: list[Figure] = Field(description="those looks' per-day Sharpe ratios, oldest first")
    ledger: str = Field("", description="the identity of the ledger the count was last read from")
    lost: bool = Field(False, description="a lower bound: a ledger that counted some of the looks is gone")
    judged: list[JudgedLook] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_sharpe_per_look(self) -> RememberedWindow:
        if len(self.sharpes) != self.looks:
            raise ValueError(f"one Sharpe ratio per look: {len(self.sharpes)} for {self.looks} looks")
        return self

    def matches(self, look: Look) -> bool:
        """The same window of the same market and tickers as ``look``."""
        return (self.market, sorted(self.tickers), self.start, self.end) == (
            look.market,
            sorted(look.tickers),
            look.start,
            look.end,
        )

    def judged_as(self, look: Look) -> JudgedLook | None:
        """The run's own look with ``look``'s run, strategy and policy, if it was judged here before
        (a run folder copied under another name is another look, as in the ledger)."""
        mine = (look.run_id, look.strategy, look.policy)
        return next((j for j in self.judged if (j.run_id, j.strategy, j.policy) == mine), None)


class RememberedLooks(Artifact):
    """``<run>/looks.json``: the run's :class:`RememberedWindow` per window it was judged on."""

    FILE = "the run's remembered looks"
    SCHEMA_VERSION = 1

    windows: list[RememberedWindow] = Field(default_factory=list)

    def find(self, look: Look) -> RememberedWindow | None:
        """The remembered window of ``look`` (None: the run was never judged there)."""
        return next((w for w in self.windows if w.matches(look)), None)


def read_memory(path: Path, report: Path | None = None) -> RememberedLooks:
    """The remembered looks at ``path`` (malformed: a one-line error). Without the file, what the
    run's last report ``report`` states (:func:`from_report`; an unreadable report is passed over:
    the backtest is about to rewrite it), else nothing."""
    if path.is_file():
        return RememberedLooks.read(path)
    if report is None or not report.is_file():
        return RememberedLooks()
    try:
        return from_report(MetricsDocument.read(report))
    except PodracerError as err:
        log.warning("the run's last report is not read for its looks: %s", one_line(err))
        return RememberedLooks()


def record_and_remember(ledger: Path, look: Look, path: Path, *, report: Path | None = None) -> LookCount:
    """Record ``look`` in the ledger at ``ledger`` (``backtests.looks.record_look``) and count it with
    the looks the run remembers at ``path`` (:func:`combine`), then remember the count there (written
    atomically). The memory is read first: a malformed one is a one-line error and nothing is recorded."""
    memory = read_memory(path, report)
    count = combine(memory.find(look), look, record_look(ledger, look))
    remember(memory, look, count).write(path)
    return count


def combine(window: RememberedWindow | None, look: Look, count: LookCount) -> LookCount:
    """``count`` (the ledger's, just recorded) with the remembered looks at ``look``'s window taken
    into account: the larger count, ``lost`` when it is a lower bound (see the module docstring)."""
    if window is None:
        return count
    same = bool(window.ledger) and window.ledger == count.ledger
    if same and not window.lost and len(count.all_sharpes) >= window.looks:
        return count  # the ledger holds every remembered look: its count is exact
    mine = window.judged_as(look)
    known = mine is not None or (same and not count.new)  # this look is among the remembered ones
    remembered = tuple(window.sharpes) + (() if known else (look.sharpe,))
    if len(remembered) <= len(count.all_sharpes):
        return dataclasses.replace(count, lost=True)
    first = min(mine.first if mine is not None else len(remembered), len(remembered))
    return dataclasses.replace(
        count, earlier_sharpes=remembered[: first - 1], all_sharpes=remembered, lost=True
    )


def remember(memory: RememberedLooks, look: Look, count: LookCount) -> RememberedLooks:
    """``memory`` with ``look``'s window updated for ``count`` (:func:`combine`'s result): the count
    when it is not below the remembered one, and ``look`` among the run's own looks there."""
    window = memory.find(look)
    judged = list(window.judged) if window is not None else []
    if window is None or window.judged_as(look) is None:
        judged.append(
            JudgedLook(run_id=look.run_id, strategy=look.strategy, policy=look.policy, first=count.looks)
        )
    sharpes = list(count.all_sharpes) or [look.sharpe]
    if window is not None and len(sharpes) < window.looks:  # combine never returns fewer; kept safe
        sharpes = list(window.sharpes)
    updated = RememberedWindow(
        market=look.market,
        tickers=sorted(look.tickers),
        start=look.start,
        end=look.end,
        looks=len(sharpes),
        sharpes=[_finite(s) for s in sharpes],
        ledger=count.ledger,
        lost=count.lost or (window is not None and window.lost),
        judged=judged,
    )
    others = [w for w in memory.windows if not w.matches(look)]
    return memory.model_copy(update={"windows": [*others, updated]})


def from_report(doc: MetricsDocument) -> RememberedLooks:
    """The memory a report written before ``looks.json`` existed stands for: its look's window, the
    count it states and the ledger that counted it (nothing when it names no look or no ledger; a
    report from before ledgers had an identity cannot say which ledger counted it)."""
    oos = doc.oos_test
    key = oos.look if oos is not None else None
    if oos is None or key is None or not key.ledger or not oos.looks:
        return RememberedLooks()
    window = RememberedWindow(
        market=key.market,
        tickers=sorted(key.tickers),
        start=key.start,
        end=key.end,
        looks=oos.looks,
        sharpes=spread_of(oos.looks, oos.looks_sharpe_variance),
        ledger=key.ledger,
        lost=bool(oos.looks_unknown),
        judged=[
            JudgedLook(
                run_id=key.run_id,
                strategy=key.strategy,
                policy=key.policy,
                first=oos.looks_first or oos.looks,
            )
        ],
    )
    return RememberedLooks(windows=[window])


def spread_of(looks: int, variance: float | None) -> list[float | None]:
    """``looks`` Sharpe ratios whose sample variance (ddof=1) is ``variance``: ``+a, -a`` and zeros
    (``2 a^2 / (K - 1) = variance``); undefined ones (the null variance stands in) without one."""
    if looks < 2 or variance is None or not math.isfinite(variance) or variance <= 0.0:
        return [None] * max(1, looks)
    a = math.sqrt(variance * (looks - 1) / 2.0)
    return [a, -a] + [0.0] * (looks - 2)


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None
