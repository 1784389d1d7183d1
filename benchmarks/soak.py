"""A simulated year of unattended operation: nightly update + retrain + prune, paper sessions, faults.

    python benchmarks/soak.py --nights 250            # the year (nice -n 10 on a shared machine)
    python benchmarks/soak.py --nights 13 --json      # a short one
    python benchmarks/soak.py --nights 13 --scripted-promotion   # ... without the two real retrains

The clock is the fake Alpaca's (``tests/alpaca_fake.py``: trading and market data on loopback),
moved along the XNAS calendar from 2024-01-02: each night a retrain (the real pipeline, lock,
registry and ``[retention]`` prune; its update step fetches the previous session's minute bars into
the real bar store, its tournament and scores are scripted, so a night takes milliseconds) and each
session ``--cycles`` paper cycles of a real exported bundle (real alpaca-py over HTTP, journal, book
check, heartbeat). Faults are injected on a schedule drawn from ``--seed`` (each kind at least once
when there are enough nights):

- ``rate_limit_orders`` / ``rate_limit_data``: HTTP 429 with ``Retry-After`` on orders / bars;
- ``rejected_orders``: every order of a session refused (HTTP 403);
- ``paper_kill``: a real ``podracer paper --bundle ... --once`` process is SIGKILLed right after the
  broker accepted its first order (the journal row still ``submitted``), and the loop is restarted on
  the same bar;
- ``heartbeat_corrupt``: ``heartbeat.json`` overwritten with garbage before a cycle;
- ``outside_trade``: half a position sold outside podracer between two cycles; the operator
  reverses it or accepts it (alternately) before the session's last cycle;
- ``retrain_kill``: a retrain process SIGKILLed inside its tournament step (a real ``kill -9``);
- ``hung_data``: the market-data server holds a bars request past the client's deadline;
- ``concurrent_backfill``: a backfill of the last sessions runs beside the nightly update;
- ``disk_full``: every atomic write (``data.atomic``) fails with ENOSPC during the nightly update:
  the retrain fails and alerts, the next night's update fetches the sessions again;
- ``paper_disk_full``: the paper loop's heartbeat and ``reconcile.json`` cannot be written (ENOSPC)
  during a session's first cycle: the loop trades on, keeps the last good files, raises ``disk_full``
  and its next cycle clears it (the alert store itself stays writable here).

At the end (:func:`check`): every bar the fake served for the fetched sessions is in the store
exactly once; no client order id twice at the broker; the journal's books match the broker's; every
outside trade gave exactly one ``books_mismatch`` and one later ``books_clear``; runs, exports,
champion copies and the journal within ``[retention]``; and promotion still works after the year:
with ``--real-promotion`` (the benchmark's default) two REAL retrains (tournament, backtest, gate)
on small synthetic markets, one with a planted signal, which must be promoted, and one of noise,
which must not; without it (the suite's shortened soak) two scripted ones, a challenger with a
significant edge promoted and one without not (the gate's rule, not learning). The nights run the
fixed-window gate (``[gate] rule = "window"``): their scores are scripted per night.

After every retrain and cycle the soak does what an operator's timer does: ``podracer status``'s
checks and the alert hook (``app.alerts.notify``, its delivery recorded). The faults that leave a
problem (:data:`ALERTS`) must give exactly one alert and a later clear each (a fault repeated while
its problem is still open, a rejected session after a rejected session, is the same problem); the
others are absorbed where they happen and must give none. ``status`` reads a session's orders by
the broker's session the cycle ran in, so the rejected session's alert is seen although every
simulated session runs on one wall-clock day.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd

from app.alerts import AlertSettings, notify
from app.bundle import load_bundle
from app.config import Config
from app.export import export_bundle
from app.nightly.pipeline import RetrainError, run_retrain
from app.nightly.registry import read_decisions
from app.nightly.retention import home_bytes
from app.nightly.steps import ChallengerRun, DataSnapshot, Evaluation, RetrainSteps
from app.paper.alpaca_broker import AlpacaBroker, BrokerRetryPolicy
from app.paper.books import accept_broker_book, check_books
from app.paper.cycle import run_paper
from app.paper.heartbeat import heartbeat_path, read_heartbeat
from app.paper.journal import Journal, read_journal
from app.paper.options import PaperOptions
from app.paper.orders import RiskLimits
from app.workflows.status import gather_status
from backtests.metrics_model import OosTest
from backtests.verdict import EdgeVerdict
from benchmarks.soak_promotion import real_promotion as real_retrains
from data import atomic as data_atomic
from data.calendar import session_bounds, sessions_in_range
from data.sources.retry import FetchRetryPolicy
from data.sources.stream import fetch_to_store
from data.store import BarStore
from tests.alpaca_fake import KEY_ID, SECRET, FakeAlpaca, minute_bars
from tests.test_paper_support import make_run

ROOT = Path(__file__).resolve().parents[1]  # the checkout (a child process imports from here)
FAULTS = (
    "rate_limit_orders",
    "rate_limit_data",
    "rejected_orders",
    "paper_kill",
    "heartbeat_corrupt",
    "outside_trade",
    "retrain_kill",
    "hung_data",
    "concurrent_backfill",
    "disk_full",
    "paper_disk_full",
)
RETENTION = {"keep_runs": 3, "keep_champions": 2, "journal_sessions": 10, "log_max_mb": 0.02, "keep_logs": 2}
WINDOWS = {
    "train": ("2023-01-03", "2023-06-30"),
    "valid": ("2023-07-03", "2023-09-29"),
    "test": ("2023-10-02", "2023-12-29"),
    "full": ("2023-01-03", "2023-12-29"),
}
FIRST_SESSION = "2024-01-02"
DATA_TIMEOUT_S = 0.5  # the soak's market-data deadline (a hung request is cut at this)
# The alert each fault must raise through `podracer status` and the hook (one problem, one clear);
# the faults absent here are absorbed where they happen (retries, the store lock, the resume of a
# decided bar) and must raise none.
ALERTS = {
    "outside_trade": "books",
    "retrain_kill": "retrain_killed",
    "heartbeat_corrupt": "heartbeat",
    "disk_full": "retrain_failed",
    "rejected_orders": "orders_rejected",  # when the session sent any order
    "paper_disk_full": "disk_full",
}
FAST = BrokerRetryPolicy(attempts=4, base_delay=0.001, max_delay=0.01, timeout=2.0)


class FullDisk:
    """``os`` as ``data.atomic`` sees it while the disk is full: ``fsync`` fails with ENOSPC."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def fsync(self, fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


class NoSpaceUnder:
    """``os`` as ``data.atomic`` sees it while ``folder`` has no room: renaming a finished temp file
    over a file there fails with ENOSPC (the temp file is removed, the old file stays)."""

    def __init__(self, real: Any, folder: Path) -> None:
        self._real, self._folder = real, folder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def replace(self, src: Any, dst: Any) -> None:
        if Path(dst).parent == self._folder:
            raise OSError(errno.ENOSPC, "No space left on device")
        self._real.replace(src, dst)


@contextlib.contextmanager
def full_disk(under: Path | None = None):
    """Every atomic write fails (``data.atomic``: temp file, fsync, rename) while inside; ``under``:
    only those of files in that folder."""
    real = data_atomic.os
    data_atomic.os = FullDisk(real) if under is None else NoSpaceUnder(real, under)
    try:
        yield
    finally:
        data_atomic.os = real


def fault_schedule(nights: int, seed: int, rate: float = 0.08) -> dict[int, list[str]]:
    """Night -> faults: each kind once on a distinct night (when there are enough nights), then each
    kind again on any night with probability ``rate``. Night 0 has none (the first session adopts
    the books), nor has the last (the problems a fault opens clear on a later night or session)."""
    rng = random.Random(seed)
    plan: dict[int, list[str]] = {}
    nights_left = list(range(1, nights - 1))
    rng.shuffle(nights_left)
    for kind, night in zip(FAULTS, nights_left, strict=False):
        plan.setdefault(night, []).append(kind)
    for night in range(1, nights - 1):
        for kind in FAULTS:
            if rng.random() < rate and kind not in plan.get(night, []):
                plan.setdefault(night, []).append(kind)
    return plan


@dataclass
class Soak:
    """The world of one soak: the home, the fake Alpaca, the bundle, counters."""

    home: Path
    fake: FakeAlpaca
    bundle: Any
    tickers: list[str]
    sessions: pd.DatetimeIndex
    cycles: int
    seed: int
    bundle_dir: Path | None = None  # the bundle's export (what a paper process loads)
    fetched_through: int = -1  # index of the last session the nightly update stored
    injected: Counter = field(default_factory=Counter)
    seen: dict[str, Any] = field(default_factory=dict)
    max_home_bytes: int = 0
    first_fetched: int | None = None
    alerts: list[tuple[str, str]] = field(default_factory=list)  # (event, key) the hook was sent
    expected: Counter = field(default_factory=Counter)  # alerts the faults must raise, by key
    last_failed: bool = False  # the last retrain failed (a failure the night after is the same problem)
    last_rejected: bool = False  # the last session's orders were all rejected (the same, next session)
    kills: list[dict[str, Any]] = field(default_factory=list)  # each paper process killed: its orders

    def watch(self) -> None:
        """What an operator's timer does: ``podracer status`` and the alert hook (a recorder here)."""
        problems = gather_status(self.home).problem_rows()
        notify(
            self.home,
            problems,
            AlertSettings(command="true"),
            send=lambda p, s: self.alerts.append((p["event"], p["key"])),
        )

    # -- the night --
    def config(self) -> Config:
        return Config().with_updates(gate={"rule": "window", "margin": 0.1}, retention=RETENTION)

    def retrain(self, night: int, faults: list[str]) -> str:
        """The night's retrain (in a child process killed with SIGKILL under ``retrain_kill``)."""
        if "retrain_kill" in faults:
            self.injected["retrain_kill"] += 1
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            cmd = [sys.executable, "-m", "benchmarks.soak", "--child-retrain", str(self.home), str(night)]
            proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False)
            if proc.returncode != -signal.SIGKILL:
                raise AssertionError(
                    f"the retrain child was not killed: rc {proc.returncode} {proc.stderr[-500:]!r}"
                )
            self.expected["retrain_killed"] += 1
            self.watch()  # between the kill and the next retrain: the lock names a dead holder
        steps = ScriptedSteps(self, night, faults)
        if "disk_full" in faults and not self.last_failed:
            self.expected["retrain_failed"] += 1
        try:
            outcome = run_retrain(self.config(), self.home, steps=steps.steps())
        except RetrainError as err:
            self.last_failed = True
            return f"failed: {err}"
        finally:
            self.watch()
        self.last_failed = False
        return outcome.verdict

    def update(self, night: int, faults: list[str]) -> None:
        """The nightly update: the sessions after the last stored one, through yesterday's."""
        upto = night - 1
        if upto < 0 or upto <= self.fetched_through:
            return
        start = self.fetched_through + 1
        day = lambda i: self.sessions[i].date().isoformat()  # noqa: E731
        policy = FetchRetryPolicy(timeout_s=DATA_TIMEOUT_S, backoff_s=0.01, sleep=lambda s: None)
        if "rate_limit_data" in faults:
            self.injected["rate_limit_data"] += 1
            self.fake.fail("GET", "/v2/stocks/bars", status=429, retry_after="0", times=2)
        if "hung_data" in faults:
            self.injected["hung_data"] += 1
            self.fake.fail("GET", "/v2/stocks/bars", kind="delay", delay=DATA_TIMEOUT_S * 3, times=1)
        backfill = None
        if "concurrent_backfill" in faults and "disk_full" not in faults:
            self.injected["concurrent_backfill"] += 1
            lo = max(0, upto - 5)

            def run_backfill() -> None:
                fetch_to_store(
                    self.home, "alpaca", self.tickers, day(lo), day(upto), "1m",
                    policy=FetchRetryPolicy(timeout_s=5.0, backoff_s=0.01, sleep=lambda s: None),
                    writer="backfill",
                )  # fmt: skip

            backfill = threading.Thread(target=run_backfill)
            backfill.start()
        try:
            if "disk_full" in faults:
                self.injected["disk_full"] += 1
                with full_disk():
                    fetch_to_store(
                        self.home, "alpaca", self.tickers, day(start), day(upto), "1m", policy=policy
                    )
            else:
                fetch_to_store(self.home, "alpaca", self.tickers, day(start), day(upto), "1m", policy=policy)
        finally:
            if backfill is not None:
                backfill.join()
            self.fake.faults.clear()
        self.first_fetched = start if self.first_fetched is None else self.first_fetched
        self.fetched_through = upto

    # -- the session --
    def session(self, night: int, faults: list[str], log: Any) -> None:
        """``cycles`` paper cycles of session ``night``, the session's faults injected."""
        fake = self.fake
        opens, closes = (
            pd.DatetimeIndex(x, tz="UTC") for x in session_bounds(self.sessions[night : night + 1])
        )
        open_, close = opens[0], closes[0]
        fake.bars = minute_bars(self.tickers, open_, close, seed=self.seed)  # today's prices
        span = (close - open_ - pd.Timedelta(minutes=60)) / max(1, self.cycles)
        times = [open_ + pd.Timedelta(minutes=45) + k * span for k in range(self.cycles)]
        times = [t.floor("15min") + pd.Timedelta(minutes=1) for t in times]
        outside = "outside_trade" in faults and self.cycles >= 3
        posts = fake.order_posts
        for k, now in enumerate(times):
            fake.set_time(now)
            if "rejected_orders" in faults:  # the whole session's orders
                self.injected["rejected_orders"] += k == 0
                fake.fill_mode = "reject"
            if "rate_limit_orders" in faults and k == 0:
                self.injected["rate_limit_orders"] += 1
                fake.fail("POST", "/v2/orders", status=429, retry_after="0", times=2)
            if "heartbeat_corrupt" in faults and k == 0:
                self.injected["heartbeat_corrupt"] += 1
                heartbeat_path(self.home).write_text('{"time": 12, "status": [')
                self.expected["heartbeat"] += 1
                self.watch()
            if outside and k == 1:
                self.outside_trade()
            if outside and k == self.cycles - 1:
                self.operator_answers()
            no_room = "paper_disk_full" in faults and k == 0
            if no_room:
                self.injected["paper_disk_full"] += 1
                self.expected["disk_full"] += 1  # raised now, cleared by the next cycle's writes
            with full_disk(under=self.home / "paper") if no_room else contextlib.nullcontext():
                status = self.killed_cycle() if "paper_kill" in faults and k == 0 else "not killed"
                if status == "killed":
                    self.injected["paper_kill"] += 1
                status = self.cycle()  # (after a kill: the restarted loop, same bar)
                if self.kills and self.kills[-1].get("after") is None:
                    self.after_kill(self.kills[-1])
            fake.fill_mode = "fill"
            fake.faults.clear()
            log.write(f"{now.isoformat()} {status}\n" * 20)
            log.flush()
            self.watch()
            if "heartbeat_corrupt" in faults and k == 0 and not no_room:
                read_heartbeat(self.home)  # rewritten after the corruption (raises when unreadable)
        rejected = "rejected_orders" in faults and fake.order_posts > posts  # every order sent refused
        if rejected and not self.last_rejected:
            self.expected["orders_rejected"] += 1
        self.last_rejected = rejected
        fake.set_time(close + pd.Timedelta(minutes=5))

    def cycle(self) -> str:
        """One cycle of the paper loop, in this process."""
        broker = AlpacaBroker(retry=FAST, sleep=lambda s: None)
        options = PaperOptions(
            limits=RiskLimits(max_order_notional=1e9, daily_loss_limit=None), fill_timeout=0.2, fill_poll=0.01
        )
        with Journal.for_home(self.home) as journal:
            (result,) = run_paper(
                self.bundle, broker, journal, options, once=True, heartbeat=heartbeat_path(self.home)
            )
        return result.status

    def killed_cycle(self) -> str:
        """A real ``podracer paper --bundle ... --once`` process, SIGKILLed by the broker's hook right
        after it created the process's first order (before its reply): "killed", or the process's
        exit when it sent no order."""
        proc: list[subprocess.Popen] = []
        created: list[str] = []

        def kill_at_first_order(order: Any) -> None:
            created.append(order.client_order_id)
            if len(created) == 1:
                os.kill(proc[0].pid, signal.SIGKILL)

        argv = [
            sys.executable,
            "-m",
            "app.cli",
            "--home",
            str(self.home),
            "paper",
            "--bundle",
            str(self.bundle_dir),
        ]
        argv += [
            "--once",
            "--fill-timeout",
            "0.2",
            "--max-order-notional",
            "1e9",
            "--daily-loss-limit",
            "0.5",
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PODRACER_LOCK_DIR": str(self.home / "paper")}
        self.fake.on_order = kill_at_first_order
        try:
            proc.append(
                subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            )
            out, _ = proc[0].communicate(timeout=120)
        finally:
            self.fake.on_order = None
        if proc[0].returncode != -signal.SIGKILL:
            if created:
                raise AssertionError(
                    f"the paper process outlived its kill: rc {proc[0].returncode} {out[-500:]!r}"
                )
            return f"exit {proc[0].returncode}"
        self.kills.append({"client_order_id": created[0]})
        return "killed"

    def after_kill(self, kill: dict[str, Any]) -> None:
        """The restart finished the killed process's bar: its order, journaled ``submitted`` when the
        process died, is found by its client id and journaled final; the broker holds it once."""
        cid = kill["client_order_id"]
        at_broker = [o for o in self.fake.orders.values() if o.client_order_id == cid]
        with Journal.for_home(self.home) as journal:
            row = journal.table("orders").set_index("client_order_id").loc[cid]
        kill["after"] = str(row["status"])
        assert len(at_broker) == 1, f"{cid}: {len(at_broker)} orders at the broker after the restart"
        assert row["status"] == at_broker[0].status == "filled", (cid, row["status"], at_broker[0].status)

    def outside_trade(self) -> None:
        held = {s: q for s, q in self.fake.positions.items() if q > 1e-9}
        if not held:
            return
        symbol = max(held, key=lambda s: held[s] * self.fake.prices.get(s, 0.0))
        self.injected["outside_trade"] += 1
        self.expected["books"] += 1
        self.seen.setdefault("outside", []).append((symbol, held[symbol]))
        self.fake.outside_trade(symbol, 0.5)

    def operator_answers(self) -> None:
        """The operator's answer to the mismatch alert: reverse the trade or accept the broker's book."""
        if not self.seen.get("outside"):
            return
        symbol, before = self.seen["outside"][-1]
        if len(self.seen["outside"]) % 2:
            self.fake.positions[symbol] = before  # bought back outside podracer
        else:
            with Journal.for_home(self.home) as journal:
                accept_broker_book(AlpacaBroker(retry=FAST, sleep=lambda s: None), journal)


class ScriptedSteps:
    """The retrain's steps: a real nightly update into the store, a scripted tournament and scores."""

    def __init__(
        self,
        soak: Soak | None,
        night: int,
        faults: list[str],
        *,
        fitness: float | None = None,
        edge: str = "",
    ) -> None:
        self.soak, self.night, self.faults = soak, night, faults
        rng = random.Random(night)
        self.fitness = fitness if fitness is not None else rng.uniform(0.0, 2.0)
        self.edge = edge or ("significant" if rng.random() < 0.5 else "not significant")

    def steps(self) -> RetrainSteps:
        return RetrainSteps(self.update_data, self.tournament, self.evaluate, self.export)

    def update_data(self, config: Any, home: Path) -> DataSnapshot:
        if self.soak is not None:
            self.soak.update(self.night, self.faults)
        return DataSnapshot(splits=None, windows=WINDOWS, source="alpaca", update={})

    def tournament(self, config: Any, home: Path, data: Any, champion: Any) -> ChallengerRun:
        run_id = f"nightly-{self.night:04d}-{os.getpid()}"
        run_dir = home / "runs" / run_id
        (run_dir / "champion").mkdir(parents=True, exist_ok=True)
        (run_dir / "champion" / "policy.safetensors").write_bytes(os.urandom(20_000))
        (run_dir / "champion" / "spec.json").write_text(json.dumps({"run": run_id}))
        (run_dir / "leaderboard.sqlite").write_bytes(b"\0" * 50_000)
        if os.environ.get("PODRACER_SOAK_KILL") == "tournament":
            os.kill(os.getpid(), signal.SIGKILL)  # a real kill -9, mid-run
        return ChallengerRun(run_id=run_id, run_dir=run_dir, policy_dir=run_dir / "champion", num_trials=4)

    def evaluate(self, config: Any, home: Path, data: Any, challenger: Any, champion: Any) -> Evaluation:
        champ = None if champion is None else {"fitness": 1.0, "sharpe_ratio": 1.0}
        edge = EdgeVerdict(self.edge, ("PSR 0.990",) if self.edge == "significant" else ("PSR 0.400",))  # type: ignore[arg-type]
        return Evaluation(
            fitness="sharpe",
            window=WINDOWS["test"],
            challenger={"fitness": self.fitness, "sharpe_ratio": self.fitness},
            champion=champ,
            edge=edge,
            test=OosTest(looks=1, psr_after_looks=0.99 if self.edge == "significant" else 0.4),
        )

    def export(self, config: Any, home: Path, challenger: Any) -> Path:
        out = home / "exports" / f"{challenger.run_id}-champion"
        out.mkdir(parents=True, exist_ok=True)
        (out / "policy.onnx").write_bytes(os.urandom(30_000))
        return out


def _child_retrain(home: str, night: int) -> None:
    """``--child-retrain``: a retrain that SIGKILLs itself inside its tournament step."""
    os.environ["PODRACER_SOAK_KILL"] = "tournament"
    config = Config().with_updates(gate={"rule": "window", "margin": 0.1}, retention=RETENTION)
    run_retrain(config, home, steps=ScriptedSteps(None, night, []).steps())


def build(home: Path, nights: int, cycles: int, seed: int) -> tuple[Soak, FakeAlpaca]:
    """The home with an exported bundle, and the fake Alpaca serving a deterministic market."""
    run = make_run(home / "fixture", seed=seed)
    bundle_dir = export_bundle(run.run_dir, exporter="torchscript")
    bundle = load_bundle(bundle_dir)
    tickers = list(bundle.tickers)
    sessions = sessions_in_range(
        pd.Timestamp(FIRST_SESSION), pd.Timestamp(FIRST_SESSION) + pd.Timedelta(days=2 * nights + 30)
    )
    sessions = sessions[: nights + 1]
    source = lambda symbols, start, end: minute_bars(  # noqa: E731
        [s for s in symbols if s in tickers], start if start is not None else pd.Timestamp("2023-12-01", tz="UTC"),
        end if end is not None else pd.Timestamp("2025-12-31", tz="UTC"), seed=seed,
    )  # fmt: skip
    fake = FakeAlpaca(prices={t: 100.0 for t in tickers}, cash=100_000.0, bar_source=source)
    soak = Soak(
        home=home,
        fake=fake,
        bundle=bundle,
        tickers=tickers,
        sessions=sessions,
        cycles=cycles,
        seed=seed,
        bundle_dir=bundle_dir,
    )
    return soak, fake


def check(soak: Soak, *, scripted_promotion: bool = True) -> dict[str, Any]:
    """The year's invariants (raises AssertionError naming the first broken one); returns the figures.
    ``scripted_promotion``: end with the two scripted retrains of the gate's rule."""
    home, fake = soak.home, soak.fake
    out: dict[str, Any] = {}
    # the store: every bar served for the fetched sessions, once
    lo, hi = soak.first_fetched, soak.fetched_through
    stored = BarStore(home).read("1m", soak.tickers)
    opens, closes = session_bounds(soak.sessions[lo : hi + 1])
    want = minute_bars(
        soak.tickers, pd.Timestamp(opens[0], tz="UTC"), pd.Timestamp(closes[-1], tz="UTC"), seed=soak.seed
    )
    total = 0
    for ticker in soak.tickers:
        got = pd.DatetimeIndex(stored[ticker]["timestamp"])
        expected = pd.DatetimeIndex(want[want["ticker"] == ticker]["timestamp"])
        assert not got.duplicated().any(), f"{ticker}: a bar stored twice"
        missing = expected.difference(got)
        assert missing.empty, f"{ticker}: {len(missing)} bars lost, first {missing[0]}"
        total += len(got)
    out["bars_stored"] = total
    # the broker: one order per client order id
    ids = Counter(o.client_order_id for o in fake.orders.values())
    assert max(ids.values(), default=1) == 1, (
        f"client order ids twice at the broker: {[c for c, n in ids.items() if n > 1]}"
    )
    out["broker_orders"] = len(ids)
    # the books
    with Journal.for_home(home) as journal:
        record = check_books(AlpacaBroker(retry=FAST, sleep=lambda s: None), journal, when="reconcile")
    assert record.matched, f"the books do not reconcile at the end: {record.message}"
    events = read_journal(home)["events"]["kind"].tolist()
    mismatches, clears = events.count("books_mismatch"), events.count("books_clear")
    # compacted days keep their events as counts
    for text in read_journal(home)["daily"]["events"]:
        counts = json.loads(text)
        mismatches += counts.get("books_mismatch", 0)
        clears += counts.get("books_clear", 0)
    n = soak.injected["outside_trade"]
    assert mismatches == clears == n, (
        f"{n} outside trades gave {mismatches} mismatch and {clears} clear events"
    )
    out["book_alerts"] = {"mismatch": mismatches, "clear": clears}
    # the alerts: one problem and one later clear per fault that leaves one; none for the rest
    soak.watch()
    raised = Counter(key for event, key in soak.alerts if event == "problem")
    cleared = Counter(key for event, key in soak.alerts if event == "clear")
    assert raised == cleared, f"alerts never cleared: {raised - cleared}"
    unexpected = set(raised) - set(ALERTS.values())
    assert not unexpected, f"alerts no fault explains: {sorted(unexpected)}"
    for kind, key in ALERTS.items():  # one alert per problem the faults opened (soak.expected counts them)
        n, want = soak.injected[kind], soak.expected[key]
        assert raised[key] == want, f"{kind}: {n} faults opened {want} problems, {raised[key]} alerts"
        assert (want >= 1) == (n >= 1) or kind == "rejected_orders", f"{kind}: {n} faults, {want} problems"
        assert want <= n, f"{kind}: {n} faults, {want} problems"
    out["alerts"] = {key: {"problem": raised[key], "clear": cleared[key]} for key in sorted(raised)}
    out["problems_opened"] = {key: soak.expected[key] for key in sorted(set(ALERTS.values()))}
    # the disk: within [retention]
    nightly = [p for p in (home / "runs").glob("nightly-*")]
    assert len(nightly) <= RETENTION["keep_runs"] + 2, f"{len(nightly)} nightly runs kept"
    exports = list((home / "exports").glob("nightly-*"))
    assert len(exports) <= RETENTION["keep_champions"] + 1, f"{len(exports)} champion exports kept"
    sessions = read_journal(home)["decisions"]["session"].nunique()
    assert sessions <= RETENTION["journal_sessions"] + 1, f"{sessions} sessions in full in the journal"
    for log in (home / "logs").glob("*.log*"):
        assert log.stat().st_size <= RETENTION["log_max_mb"] * 1e6 * 4, f"{log} grew to {log.stat().st_size}"
    out["home_bytes_end"] = home_bytes(home)["total"]
    out["home_bytes_max"] = soak.max_home_bytes
    if not scripted_promotion:
        return out  # the real retrains run after the year (run_soak)
    # promotion still works: a significant edge is promoted, noise is not (scripted scores)
    config = soak.config()
    edge = run_retrain(
        config, home, steps=ScriptedSteps(None, 10_001, [], fitness=50.0, edge="significant").steps()
    )
    noise = run_retrain(
        config, home, steps=ScriptedSteps(None, 10_002, [], fitness=60.0, edge="not significant").steps()
    )
    assert edge.verdict == "promoted" and noise.verdict == "rejected", (edge.verdict, noise.verdict)
    out["final_promotion"] = {"edge": edge.verdict, "noise": noise.verdict}
    return out


def run_soak(
    home: Path,
    nights: int,
    *,
    cycles: int = 3,
    seed: int = 0,
    progress: bool = False,
    real_promotion: bool = False,
) -> dict[str, Any]:
    """Run ``nights`` nights and sessions, then :func:`check`; returns the figures. ``real_promotion``:
    the last nights are two real retrains (``benchmarks/soak_promotion.py``) instead of scripted ones."""
    started = time.perf_counter()
    soak, fake = build(home, nights, cycles, seed)
    plan = fault_schedule(nights, seed)
    verdicts: Counter = Counter()
    with fake, _env(fake):
        (home / "logs").mkdir(parents=True, exist_ok=True)
        with open(home / "logs" / "paper.log", "a") as log:
            for night in range(nights):
                faults = plan.get(night, [])
                fake.set_time(
                    pd.Timestamp(soak.sessions[night]).tz_localize("America/New_York") + pd.Timedelta(hours=6)
                )
                verdict = soak.retrain(night, faults)
                verdicts[verdict.split(":")[0]] += 1
                soak.session(night, faults, log)
                soak.max_home_bytes = max(soak.max_home_bytes, home_bytes(home)["total"])
                if progress and night % 10 == 0:
                    print(f"night {night}: {verdict[:60]} {dict(soak.injected)}", file=sys.stderr, flush=True)
            figures = check(soak, scripted_promotion=not real_promotion)
    if real_promotion:  # the last nights for real: a planted edge promoted, noise not
        figures["final_promotion"] = real_retrains(home.with_name(home.name + "-promotion"), seed)
    injected = {k: soak.injected[k] for k in FAULTS}
    missing = [k for k, v in injected.items() if not v] if nights > len(FAULTS) else []
    assert not missing, f"faults never injected: {missing}"
    return {
        "nights": nights,
        "cycles_per_session": cycles,
        "seed": seed,
        "sessions": [soak.sessions[0].date().isoformat(), soak.sessions[nights - 1].date().isoformat()],
        "faults_injected": injected,
        "retrains": dict(verdicts),
        "decisions": len(read_decisions(home)),
        "wall_s": round(time.perf_counter() - started, 1),
        **figures,
        "paper_kills": soak.kills,
    }


@contextlib.contextmanager
def _env(fake: FakeAlpaca):
    names = ("APCA_API_KEY_ID", "APCA_API_SECRET_KEY", "APCA_API_BASE_URL", "APCA_API_DATA_URL")
    before = {n: os.environ.get(n) for n in names}
    os.environ.update(dict(zip(names, (KEY_ID, SECRET, fake.url, fake.url), strict=True)))
    try:
        yield
    finally:
        for n, v in before.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=250)
    parser.add_argument("--cycles", type=int, default=3, help="paper cycles per session")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--home", type=Path, default=None, help="keep the home here (default: a temp folder)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--scripted-promotion",
        action="store_true",
        help="end with the scripted gate check instead of two real retrains (planted edge, noise)",
    )
    parser.add_argument("--child-retrain", nargs=2, metavar=("HOME", "NIGHT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_retrain:
        _child_retrain(args.child_retrain[0], int(args.child_retrain[1]))
        return
    with tempfile.TemporaryDirectory(prefix="podracer-soak-") as tmp:
        home = args.home or Path(tmp) / "home"
        report = run_soak(
            home,
            args.nights,
            cycles=args.cycles,
            seed=args.seed,
            progress=not args.json,
            real_promotion=not args.scripted_promotion,
        )
    print(json.dumps(report, indent=None if args.json else 2, default=str))


if __name__ == "__main__":
    main()
