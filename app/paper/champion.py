"""Which bundle trades a session: a fixed one (``paper --bundle``) or the registry's champion
(``paper --champion``).

A cycle asks its source once the broker's clock says the market is open (:meth:`select`). The
bundle in charge is fixed at the **first cycle of each session** and written to the journal's
``sessions`` table; every later cycle of that session trades it, whatever happens to the registry
meanwhile, so a session belongs to exactly one bundle (the per-champion record attributes whole
sessions: ``app.paper.attribution``).

:class:`ChampionSource`, at the first cycle of a session:

1. **Restart mid-session**: the journal already names the session's bundle -> reload it (verified,
   and its ``bundle_id`` must be the one named) and trade the rest of the session with it.
2. Otherwise read the champion pointer (``app.nightly.champions.current_champion``, read-only). The
   registry may be locked by a running retrain: a short timeout, a few tries, then the bundle in
   hand keeps this session (a ``registry_locked`` warning) and the next session reads it again.
3. Load and verify the pointer's bundle with ``app.bundle.load_bundle``: the checks of
   ``paper --bundle`` (manifest hash, every file's sha256, shapes, the graph). A bundle that fails is
   **not traded**: the bundle in hand stays, one ``champion_refused`` error event per session, and
   the cycle results carry the alert (the heartbeat's status line, ``podracer status``).
4. A new ``bundle_id`` is a switch (``champion_switch`` event: ``champion switch: A -> B``); the
   cycle then rebalances from the current holdings under the same risk limits. A is the bundle in
   hand or, in a process that has none yet (a restart between sessions), the one in charge of the
   newest session the journal traded before this one; the same bundle there is no switch
   (``champion`` event).
5. No champion in charge (none promoted yet, or the last one demoted): with a benchmark
   (``[gate] before_champion = "benchmark"``, the default) the selection names it
   (``Selection.benchmark``, a ``benchmark`` event; the cycle buys it once and holds it:
   ``app.paper.benchmark``); without one, a ``no_champion`` warning and nothing is traded. The
   pointer is read again at every cycle while no champion is in charge, so a promotion takes charge
   at the next cycle.
6. **Demotion**: the pointer names no champion, but a champion's bundle traded last (the one in
   hand, or the journal's owner of the newest session before this one). Its bundle is dropped, a
   ``champion_demoted`` warning names it, and the account is handed back once
   (``Selection.takeover``): rebalanced to the benchmark's equal weights, or, with
   ``before_champion = "cash"``, sold whole (``app.paper.benchmark.cash_bundle``). The event marks
   the hand-back done, so a restart does not repeat it.

Every event a selection writes carries a ``bundle_id``: a switch (or the first champion) the new
bundle's, a resume the session's, a refusal, a locked registry or a missing champion the bundle in
hand (the one that keeps trading; none in a process that holds none yet).

The registry commits the pointer in the same transaction as the decision, after the export folder
was swapped in whole (``app.nightly.pipeline``): the pointer never names a half-written export, and
a retrain killed before its commit leaves the old pointer. The hashes are verified anyway.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from app.bundle import Bundle, BundleManifest, load_bundle
from app.champion import Champion, ChampionPointer, PointerBusy, PointerError
from app.paper.benchmark import BenchmarkBundle, cash_bundle
from app.paper.journal import Journal
from app.paper.journal_schema import SessionOwner
from data.errors import PodracerError, one_line

log = logging.getLogger(__name__)


def short(bundle_id: str | None) -> str:
    """The first 12 hex digits of a bundle id (what events and screens show)."""
    return (bundle_id or "?")[:12]


@dataclass
class Selection:
    """The bundle a cycle trades (None: nothing to trade) and what the operator must see."""

    bundle: Bundle | None
    run_id: str | None = None  # the registry champion's run (None for paper --bundle)
    alert: str | None = None  # a refused bundle or an unreadable registry: the status line's
    messages: list[str] = field(default_factory=list)
    benchmark: BenchmarkBundle | None = None  # no champion yet: the benchmark holds the account
    takeover: Bundle | None = None  # a demoted champion's book handed back: traded once, this cycle


class BundleSource(Protocol):
    """Where a cycle's bundle comes from (see the module docstring)."""

    mode: str  # "bundle" | "champion"

    @property
    def current(self) -> Bundle | None:
        """The bundle selected last (None before the first open cycle)."""
        ...

    def select(self, session: str, journal: Journal) -> Selection:
        """The bundle of ``session`` (YYYY-MM-DD), fixed at its first cycle."""
        ...


class FixedBundle:
    """``paper --bundle DIR``: one bundle for every session."""

    mode = "bundle"

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self._session: str | None = None

    @property
    def current(self) -> Bundle:
        return self.bundle

    def select(self, session: str, journal: Journal) -> Selection:
        if session != self._session:
            owner = journal.start_session(
                session, bundle_id=self.bundle.bundle_id, bundle_path=str(self.bundle.path), run_id=None,
                source="bundle",
            )  # fmt: skip
            self._session = session
            if owner.bundle_id != self.bundle.bundle_id:
                journal.event(
                    "bundle",
                    f"session {session} was started by bundle {short(owner.bundle_id)}; "
                    f"{short(self.bundle.bundle_id)} (--bundle) trades the rest of it, and the session "
                    "counts for the first in the per-champion record",
                    "warning",
                    bundle_id=self.bundle.bundle_id,
                )
        return Selection(self.bundle)


class ChampionSource:
    """``paper --champion``: the registry's champion, re-read at the first cycle of each session."""

    mode = "champion"

    def __init__(
        self,
        home: str | Path,
        *,
        pointer: ChampionPointer,
        registry_timeout: float = 1.0,
        attempts: int = 3,
        retry_wait: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        benchmark: BenchmarkBundle | None = None,
    ) -> None:
        self.home = Path(home)
        self.pointer = pointer
        self.benchmark = benchmark  # held while no champion is promoted (None: cash)
        self.registry_timeout = registry_timeout
        self.attempts = attempts
        self.retry_wait = retry_wait
        self._sleep = sleep
        self.bundle: Bundle | None = None
        self.run_id: str | None = None
        self._session: str | None = None
        self._alert: str | None = None
        self._holding_benchmark = False
        self._takeover: Bundle | None = None

    @property
    def current(self) -> Bundle | None:
        return self.bundle

    def select(self, session: str, journal: Journal) -> Selection:
        if session == self._session and self.bundle is not None:
            return Selection(self.bundle, self.run_id, self._alert)  # mid-session: never re-read
        self._alert = None
        self._holding_benchmark = False
        self._takeover = None
        owner = journal.session_owner(session)
        if owner is None or not self._resume(owner, journal):
            self._from_pointer(session, journal)
        if self.bundle is None:
            if self._holding_benchmark:
                return Selection(None, None, None, benchmark=self.benchmark, takeover=self._takeover)
            return Selection(None, None, self._alert or "no bundle to trade", takeover=self._takeover)
        journal.start_session(
            session, bundle_id=self.bundle.bundle_id, bundle_path=str(self.bundle.path), run_id=self.run_id,
            source="champion",
        )  # fmt: skip
        self._session = session
        return Selection(self.bundle, self.run_id, self._alert)

    # -- the steps of select --
    def _resume(self, owner: SessionOwner, journal: Journal) -> bool:
        """Trade the bundle the journal names for this session (a restart mid-session)."""
        if self.bundle is not None and self.bundle.bundle_id == owner.bundle_id:
            return True
        try:
            if not owner.bundle_path:
                raise PodracerError("the journal does not say where it is")
            bundle = load_bundle(owner.bundle_path)
            if bundle.bundle_id != owner.bundle_id:
                raise PodracerError(f"{owner.bundle_path} now holds bundle {short(bundle.bundle_id)}")
        except PodracerError as err:
            self._refuse(
                journal,
                f"bundle {short(owner.bundle_id)}, in charge of session {owner.session}, cannot be loaded "
                f"again ({one_line(err)}): reading the champion pointer instead",
            )
            return False
        journal.event(
            "resume",
            f"session {owner.session} resumed with bundle {short(owner.bundle_id)}"
            + (f" (run {owner.run_id})" if owner.run_id else "")
            + ": the journal names it in charge of the session",
            bundle_id=owner.bundle_id,
        )
        self.bundle, self.run_id = bundle, owner.run_id
        return True

    def _pointer(self, journal: Journal) -> tuple[bool, Champion | None]:
        """(read, champion): the registry's pointer, retried while a writer holds the lock."""
        for attempt in range(self.attempts):
            try:
                return True, self.pointer(self.home, timeout=self.registry_timeout)
            except PointerBusy:
                if attempt + 1 < self.attempts:
                    self._sleep(self.retry_wait)
            except PointerError as err:
                self._refuse(journal, f"cannot read the champion pointer: {one_line(err)}")
                return False, None
        keep = (
            f"bundle {short(self.bundle.bundle_id)} keeps this session"
            if self.bundle is not None
            else "no bundle to trade yet"
        )
        msg = f"registry locked after {self.attempts} tries (a retrain writing it?): {keep}"
        journal.event("registry_locked", msg, "warning", bundle_id=self._held())
        log.warning(msg)
        if self.bundle is None:
            self._alert = msg
        return False, None

    def _from_pointer(self, session: str, journal: Journal) -> None:
        """Take the pointer's bundle if it verifies; otherwise keep the one in hand (see above)."""
        read, champion = self._pointer(journal)
        if not read:
            return
        if champion is None:
            self._demoted(session, journal)
            if self.benchmark is not None:
                self._holding_benchmark = True
                return
            msg = "no champion in charge: nothing to trade (podracer retrain promotes one)"
            journal.event("no_champion", msg, "warning")
            self._alert = msg
            return
        run_id, path = champion.run_id, champion.bundle
        stays = f"; bundle {short(self.bundle.bundle_id)} stays" if self.bundle is not None else ""
        if not path:
            self._refuse(
                journal, f"champion {run_id} has no export bundle (nightly.export off?): not traded{stays}"
            )
            return
        try:
            bundle = load_bundle(path)
        except PodracerError as err:
            self._refuse(
                journal,
                f"champion {run_id}'s bundle {path} failed verification: {one_line(err)}; not traded{stays}",
            )
            return
        if self.bundle is not None and bundle.bundle_id == self.bundle.bundle_id:
            return  # the same champion: keep the loaded bundle (and its onnxruntime session)
        last = self._last_traded(session, journal)
        # A champion an operator put in charge (podracer promote) is followed the same way; said so.
        hand = f"; put in charge by hand: {champion.info.reason}" if champion.by_hand else ""
        if last is None or last[0] == bundle.bundle_id:
            since = f" (as in session {last[2]})" if last is not None else ""
            msg = (
                f"trading champion {run_id} (bundle {short(bundle.bundle_id)}) from session {session}{since}"
                + hand
            )
            journal.event("champion", msg, bundle_id=bundle.bundle_id)
        else:
            msg = (
                f"champion switch: {short(last[0])} -> {short(bundle.bundle_id)} "
                f"(run {last[1] or '?'} -> {run_id}, promoted {champion.promoted_at}{hand}); "
                f"session {session} rebalances from the current holdings"
            )
            journal.event("champion_switch", msg, bundle_id=bundle.bundle_id)
            log.info(msg)
        self.bundle, self.run_id = bundle, run_id

    def _demoted(self, session: str, journal: Journal) -> None:
        """The pointer names no champion: a champion's bundle that traded last (in hand, or the
        journal's owner of the newest session before ``session``) was demoted. Drop it, say so once,
        and hand its book back (:attr:`Selection.takeover`)."""
        held, run_id, manifest = self._held(), self.run_id, self.bundle.manifest if self.bundle else None
        self.bundle, self.run_id = None, None
        if held is None:
            owner = journal.session_owner(session, before=True)
            if owner is None or owner.source != "champion":
                return  # no champion ever traded here: nothing to hand back
            held, run_id, since = owner.bundle_id, owner.run_id, owner.session
            manifest = _manifest(owner.bundle_path)
        else:
            since = self._session or session
        if journal.has_event("champion_demoted", held, since=since) or manifest is None:
            return
        tickers, interval, env = manifest["tickers"], manifest["interval"], manifest.get("env_params") or {}
        self._takeover = self.benchmark if self.benchmark is not None else cash_bundle(tickers, interval, env)
        to = "the benchmark takes the account back" if self.benchmark is not None else "its book is sold"
        msg = (
            f"champion {run_id or '?'} (bundle {short(held)}) is no longer in charge (demoted: "
            f"podracer status says why): {to} from session {session}"
        )
        journal.event("champion_demoted", msg, "warning", bundle_id=held)
        log.warning(msg)

    def _last_traded(self, session: str, journal: Journal) -> tuple[str, str | None, str] | None:
        """(bundle_id, run_id, session) of the bundle that traded last: the one in hand, else the one
        the journal names in charge of the newest session before ``session`` (a restarted process)."""
        if self.bundle is not None:
            return self.bundle.bundle_id, self.run_id, self._session or "?"
        owner = journal.session_owner(session, before=True)
        return None if owner is None else (owner.bundle_id, owner.run_id, owner.session)

    def _held(self) -> str | None:
        """The bundle in hand's id (None before one is loaded)."""
        return self.bundle.bundle_id if self.bundle is not None else None

    def _refuse(self, journal: Journal, msg: str) -> None:
        journal.event("champion_refused", msg, "error", bundle_id=self._held())
        log.error(msg)
        self._alert = msg


def _manifest(bundle_path: str | None) -> dict | None:
    """A bundle folder's manifest as JSON (unverified: its tickers and settings only), None if unreadable."""
    try:
        return json.loads((Path(str(bundle_path)) / BundleManifest.FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return None
