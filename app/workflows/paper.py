"""``podracer paper``: one paper loop per home, trading a fixed bundle or the registry's champion.

The loop holds ``<home>/paper/paper.lock`` (``app.nightly.lock.ProcessLock``, exit 75 when another
loop holds it): two loops on one home would trade the same account from one journal. A fixed bundle
is loaded and verified before anything talks to the broker; the champion's bundle is loaded at the
first cycle of each session (``app.paper.champion``). Every cycle writes the heartbeat
``<home>/paper/heartbeat.json``.
"""

from __future__ import annotations

from pathlib import Path

from app.bundle import load_bundle
from app.nightly.lock import ProcessLock
from app.paper.alpaca_broker import AlpacaBroker
from app.paper.champion import BundleSource, ChampionSource, FixedBundle, short
from app.paper.cycle import CycleResult, run_paper
from app.paper.heartbeat import heartbeat_path
from app.paper.journal import Journal
from app.paper.options import PaperOptions
from data.errors import ConfigError

LOCK_NAME = "paper.lock"


def paper_lock(home: Path) -> ProcessLock:
    """The lock of the home's one paper loop: ``<home>/paper/paper.lock``."""
    return ProcessLock(home / "paper" / LOCK_NAME, command="podracer paper")


def run_paper_loop(
    home: Path,
    options: PaperOptions,
    *,
    bundle: Path | None = None,
    champion: bool = False,
    once: bool = False,
) -> list[CycleResult]:
    """Trade ``bundle`` (``--bundle``) or the registry's champion (``--champion``) until stopped."""
    if (bundle is None) == (not champion):
        raise ConfigError("give exactly one of --bundle DIR (a fixed bundle) or --champion (the registry's)")
    source: BundleSource
    if bundle is not None:
        source = FixedBundle(load_bundle(bundle))  # verified before anything talks to the broker
        what = f"bundle {short(source.bundle.bundle_id)} ({bundle})"
    else:
        source = ChampionSource(home)
        what = "the registry's champion, read at the first cycle of each session"
    with paper_lock(home):
        broker = AlpacaBroker()
        with Journal.for_home(home) as journal:
            journal.event("start", f"paper {'dry-run ' if options.dry_run else ''}{what}")
            return run_paper(source, broker, journal, options, once=once, heartbeat=heartbeat_path(home))
