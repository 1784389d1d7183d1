"""``podracer paper``: one paper loop per home and per Alpaca account, trading a fixed bundle or the
registry's champion.

The loop holds ``<home>/paper/paper.lock`` (``app.nightly.lock.ProcessLock``, exit 75 when another
loop holds it): two loops on one home would trade the same account from one journal. Once the broker
has said which account the keys open, it also holds the account's lock,
``<lock dir>/alpaca-<account id>.lock`` (:func:`account_lock_dir`: ``$PODRACER_LOCK_DIR``, else
``$XDG_STATE_HOME/podracer/locks``, else ``~/.local/state/podracer/locks``): two homes on one account
would each journal only their own fills, and each would see the other's trades as outside trades. A
second loop on the account exits 75 naming the holder's home and pid. ``flock`` is local: two
machines on one account are not caught here (the book check then halts both). A fixed bundle
is loaded and verified before anything talks to the broker; the champion's bundle is loaded at the
first cycle of each session (``app.paper.champion``). With ``--champion`` and no champion promoted
yet, the account holds the benchmark (``[gate] before_champion``, ``app.paper.benchmark``) on the
config's universe: ``[data] tickers``, else the index members today (``[data] universe``). Every cycle
writes the heartbeat ``<home>/paper/heartbeat.json``.
"""

from __future__ import annotations

import logging
import os
import re
from datetime import date
from functools import partial
from pathlib import Path

from app.bundle import load_bundle
from app.config import Config, load_config
from app.nightly.champions import current_champion
from app.nightly.lock import LockBusyError, ProcessLock, read_lock_info
from app.nightly.schedule import read_schedule
from app.paper.alpaca_broker import AlpacaBroker
from app.paper.benchmark import BenchmarkBundle, benchmark_bundle
from app.paper.champion import BundleSource, ChampionSource, FixedBundle, short
from app.paper.cycle import CycleResult, run_paper
from app.paper.heartbeat import heartbeat_path
from app.paper.journal import Journal
from app.paper.options import PaperOptions
from app.paper.sim_replay import reconcile_due, reconcile_sessions
from data.errors import ConfigError, one_line
from data.universe import members

log = logging.getLogger(__name__)

LOCK_NAME = "paper.lock"
LOCK_DIR_ENV = "PODRACER_LOCK_DIR"


def paper_lock(home: Path) -> ProcessLock:
    """The lock of the home's one paper loop: ``<home>/paper/paper.lock``."""
    return ProcessLock(home / "paper" / LOCK_NAME, command="podracer paper")


def account_lock_dir() -> Path:
    """Where the per-account paper locks live (one folder per machine user, not per home)."""
    if os.environ.get(LOCK_DIR_ENV):
        return Path(os.environ[LOCK_DIR_ENV])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "podracer" / "locks"


def account_lock(account_id: str, home: Path) -> ProcessLock:
    """The lock of the one paper loop trading Alpaca account ``account_id`` (its holder names ``home``)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", account_id) or "unknown"
    return ProcessLock(account_lock_dir() / f"alpaca-{safe}.lock", command=f"podracer paper --home {home}")


def hold_account(account_id: str | None, home: Path) -> ProcessLock | None:
    """Take the account's lock, or exit 75 naming the loop that trades it; None when the broker gave
    no account id (then only the home's lock guards)."""
    if not account_id:
        return None
    lock = account_lock(account_id, home)
    try:
        return lock.acquire()
    except LockBusyError:
        holder = read_lock_info(lock.path)
        who = "another podracer paper"
        if holder is not None and holder.command:
            who = holder.command
        where = holder.describe() if holder is not None else "unknown holder"
        raise LockBusyError(
            f"Alpaca account {account_id} is already traded by {who} ({where}); one paper loop per "
            f"account: stop that one or use other keys (lock file {lock.path})"
        ) from None


def paper_benchmark(config: Config) -> tuple[BenchmarkBundle | None, str]:
    """The benchmark ``config`` says the account holds before a champion qualifies, and what the start
    event says of it (None: cash, as ``[gate] before_champion = "cash"`` or with no universe known)."""
    if config.gate.before_champion == "cash":
        return None, "before a champion qualifies: cash ([gate] before_champion)"
    tickers = list(config.data.tickers)
    if not tickers and config.data.universe:
        tickers = members(date.today())
    if not tickers:
        return None, (
            "before a champion qualifies: cash, no universe known for the benchmark "
            '(set [data] tickers or [data] universe, or [gate] before_champion = "cash")'
        )
    bench = benchmark_bundle(tickers, config.data.interval, config.env.model_dump())
    return bench, f"before a champion qualifies: the benchmark, equal weight of {len(bench.tickers)} tickers"


def run_paper_loop(
    home: Path,
    options: PaperOptions,
    *,
    bundle: Path | None = None,
    champion: bool = False,
    once: bool = False,
    config: Config | None = None,
) -> list[CycleResult]:
    """Trade ``bundle`` (``--bundle``) or the registry's champion (``--champion``) until stopped."""
    if (bundle is None) == (not champion):
        raise ConfigError("give exactly one of --bundle DIR (a fixed bundle) or --champion (the registry's)")
    source: BundleSource
    if bundle is not None:
        source = FixedBundle(load_bundle(bundle))  # verified before anything talks to the broker
        what = f"bundle {short(source.bundle.bundle_id)} ({bundle})"
    else:
        bench, before = paper_benchmark(config or Config())
        source = ChampionSource(home, pointer=current_champion, benchmark=bench)
        what = f"the registry's champion, read at the first cycle of each session; {before}"
    with paper_lock(home):
        broker = AlpacaBroker()
        account = None if options.dry_run else hold_account(broker.account().account_id, home)
        try:
            with Journal.for_home(home) as journal:
                journal.event("start", f"paper {'dry-run ' if options.dry_run else ''}{what}")
                bound = (config or Config()).paper.max_slippage_gap_bps
                after = partial(replay_after_close, home, journal, broker, bound)
                return run_paper(
                    source,
                    broker,
                    journal,
                    options,
                    once=once,
                    heartbeat=heartbeat_path(home),
                    on_close=after,
                )
        finally:
            if account is not None:
                account.release()


def replay_after_close(home: Path, journal: Journal, broker: AlpacaBroker, bound_bps: float) -> None:
    """After a session: replay the sessions traded since the last replay in the simulator
    (``app.paper.sim_replay``); a failure (no bars yet, the data API down) is journaled and retried
    at the next closed cycle."""
    try:
        if not reconcile_due(home, journal):
            return
        record = reconcile_sessions(home, journal, broker, bound_bps=bound_bps)
    except Exception as err:  # noqa: BLE001 - a failed replay must never stop the trading loop
        journal.event("sim_reconcile", f"the replay in the simulator failed: {one_line(err)}", "warning")
        log.warning("replay in the simulator failed: %s", err)
        return
    day = record.days[-1] if record.days else None
    if day is not None:
        journal.event(
            "sim_reconcile",
            f"{day.session}: paper P&L {day.paper_pnl:+,.2f} vs simulated {day.sim_pnl:+,.2f}",
        )


def slippage_bound(home: Path, config: Path | None) -> float:
    """``[paper] max_slippage_gap_bps`` of ``config``, else of the config the nightly schedule
    recorded, else the default."""
    if config is None:
        scheduled = read_schedule(home)
        config = Path(scheduled.config) if scheduled is not None and scheduled.config else None
    return (load_config(config) if config is not None else Config()).paper.max_slippage_gap_bps


def reconcile_now(home: Path, broker: AlpacaBroker, bound_bps: float, *, redo: bool = False):
    """``podracer reconcile``: replay the sessions the record lacks (``redo``: all) in the simulator on
    the broker's bars and return the record (``app.paper.sim_record.SimRecord``)."""
    with Journal.for_home(home) as journal:
        return reconcile_sessions(home, journal, broker, bound_bps=bound_bps, redo=redo)
