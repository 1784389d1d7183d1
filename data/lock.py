"""Single-holder process locks: ``fcntl.flock`` on a file plus its holder's pid.

:class:`ProcessLock` is the retrain's lock (``<home>/retrain.lock``) and the paper loop's; it never
waits. :func:`store_lock` is the bar store's writer lock (``<home>/data/store.lock``): every writer of
the store (``data fetch``, ``data import``, ``data synth``, the nightly update) holds it around each
read-merge-write of month files and the manifest row that records them, waiting for another writer
with a progress line (see :func:`store_lock` for why it waits rather than exiting 75).

Why ``flock`` and not a bare pid file: the kernel drops an ``flock`` lock the moment its holder dies
(crash, ``kill -9``, power loss of the process), so a stale lock can never block the next run, and
there is no window in which two processes both see "no live holder" and both go ahead. The pid,
host and start time written into the file are only there to name the holder in the error message
and to log that a dead holder's lock was recovered.

The file itself is never deleted: unlinking a lock file races with a process that has just opened
the old inode (it would lock a file nobody else can see). ``flock`` is advisory and local: do not
put the podracer home on NFS if two machines may retrain it at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data.errors import PodracerError

log = logging.getLogger(__name__)

WAIT_NOTICE_S = 2.0  # a waiting writer says who it waits for after this long, then as often again
STORE_LOCK_WAIT_S = 600.0  # the longest a store writer waits for another before exiting 75


class LockBusyError(PodracerError):
    """Another live process holds the lock."""

    # EX_TEMPFAIL: schedulers and scripts can tell "someone else is running" from a real failure.
    exit_code = 75


@dataclass(frozen=True)
class LockInfo:
    """What the previous or current holder wrote into the lock file (all optional: it may be empty)."""

    pid: int | None
    host: str | None
    started_at: float | None
    command: str | None

    def describe(self) -> str:
        """A short human description, e.g. ``pid 4242 on host-a since 2026-03-09 02:00:01 UTC``."""
        parts = []
        if self.pid is not None:
            parts.append(f"pid {self.pid}")
        if self.host:
            parts.append(f"on {self.host}")
        if self.started_at is not None:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started_at))
            parts.append(f"since {stamp}")
        return " ".join(parts) or "unknown holder"


def _parse_info(raw: bytes) -> LockInfo:
    try:
        obj: Any = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        obj = {}
    if not isinstance(obj, dict):
        obj = {}
    pid = obj.get("pid")
    started = obj.get("started_at")
    return LockInfo(
        pid=pid if isinstance(pid, int) else None,
        host=obj.get("host") if isinstance(obj.get("host"), str) else None,
        started_at=float(started) if isinstance(started, int | float) else None,
        command=obj.get("command") if isinstance(obj.get("command"), str) else None,
    )


def read_lock_info(path: str | os.PathLike[str]) -> LockInfo | None:
    """The holder info in a lock file (None if the file does not exist)."""
    try:
        return _parse_info(Path(path).read_bytes())
    except FileNotFoundError:
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class ProcessLock:
    """An exclusive, non-blocking lock on ``path``; use as a context manager or ``acquire``/``release``.

    ``acquire`` raises :class:`LockBusyError` naming the live holder. If the file names a holder that
    is gone (its lock died with it), the lock is taken over and :attr:`recovered` holds the old info.
    """

    def __init__(self, path: str | os.PathLike[str], *, command: str = "podracer retrain") -> None:
        self.path = Path(path)
        self.command = command
        self.recovered: LockInfo | None = None
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def acquire(
        self,
        *,
        wait_s: float = 0.0,
        on_wait: Callable[[LockInfo, float], None] | None = None,
        poll_s: float = 0.05,
    ) -> ProcessLock:
        """Take the lock; while another live process holds it, try again for up to ``wait_s`` seconds
        (0: not at all), calling ``on_wait(holder, waited_s)`` about every :data:`WAIT_NOTICE_S`
        seconds, then raise :class:`LockBusyError` naming the holder."""
        if self._fd is not None:
            raise PodracerError(f"lock {self.path} is already held by this object")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_CREAT without O_TRUNC: the current holder's info must survive until we own the lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        started = time.monotonic()
        noticed = 0.0
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    waited = time.monotonic() - started
                    holder = _parse_info(_read_fd(fd))
                    if waited >= wait_s:
                        busy = "is running" if wait_s <= 0 else f"held it for the {wait_s:g} s we waited"
                        raise LockBusyError(
                            f"another {holder.command or self.command} {busy} ({holder.describe()}); "
                            f"lock file {self.path}"
                        ) from None
                    if on_wait is not None and waited - noticed >= WAIT_NOTICE_S:
                        noticed = waited
                        on_wait(holder, waited)
                    time.sleep(min(poll_s, max(0.0, wait_s - waited)))
        except BaseException:
            os.close(fd)
            raise
        previous = _parse_info(_read_fd(fd))
        if previous.pid is not None:
            # We got the lock although the file names a holder: that process died without releasing.
            self.recovered = previous
            alive = " (pid reused by another process)" if _pid_alive(previous.pid) else ""
            log.warning("recovered a stale lock %s left by %s%s", self.path, previous.describe(), alive)
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": time.time(),
            "command": self.command,
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        """Clear the holder info and drop the lock (idempotent)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            # An empty file means "released cleanly"; a pid left behind means its holder died.
            os.ftruncate(fd, 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> ProcessLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_fd(fd: int) -> bytes:
    chunks = []
    offset = 0
    while True:
        chunk = os.pread(fd, 4096, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)
        if offset > 65536:  # a lock file is tiny; anything larger is garbage we ignore
            return b""


@contextlib.contextmanager
def process_lock(path: str | os.PathLike[str], *, command: str = "podracer retrain") -> Iterator[ProcessLock]:
    """Context manager form of :class:`ProcessLock`."""
    lock = ProcessLock(path, command=command)
    with lock:
        yield lock


def store_lock_path(home: str | os.PathLike[str]) -> Path:
    """``<home>/data/store.lock``: the one writer lock of the bar store, its actions and manifest."""
    return Path(home) / "data" / "store.lock"


class _StoreHold:
    """This process's hold on one store lock: a thread lock (threads of one process are one flock
    holder, so they take turns here) and the flock taken by the outermost holder."""

    def __init__(self) -> None:
        self.thread_lock = threading.RLock()
        self.depth = 0
        self.lock: ProcessLock | None = None


_STORE_HOLDS: dict[str, _StoreHold] = {}
_HOLDS_GUARD = threading.Lock()


def _log_wait(holder: LockInfo, waited_s: float) -> None:
    log.warning(
        "waiting %.0f s for the bar store: %s (%s) is writing it",
        waited_s,
        holder.command or "another writer",
        holder.describe(),
    )


@contextlib.contextmanager
def store_lock(
    home: str | os.PathLike[str],
    *,
    command: str = "podracer data",
    wait_s: float = STORE_LOCK_WAIT_S,
    on_wait: Callable[[LockInfo, float], None] | None = _log_wait,
) -> Iterator[None]:
    """Hold the bar store's writer lock (re-entrant within a thread; threads of a process take turns).

    Why a second writer *waits* (with a progress line, then exit 75 after ``wait_s``) instead of
    exiting 75 at once: writers hold the lock only around one chunk's read-merge-write and manifest
    row (seconds), never across a network request, so two fetches interleave chunk by chunk and the
    nightly update running beside a manual backfill finishes instead of failing the retrain. Only a
    writer stuck far longer than any chunk write (``wait_s``) is reported, naming its holder."""
    key = str(store_lock_path(home).resolve())
    with _HOLDS_GUARD:
        hold = _STORE_HOLDS.setdefault(key, _StoreHold())
    started = time.monotonic()
    noticed = 0.0
    while not hold.thread_lock.acquire(timeout=0.1):
        waited = time.monotonic() - started
        if waited >= wait_s:
            raise LockBusyError(f"another thread of this process holds the bar store lock {key}")
        if on_wait is not None and waited - noticed >= WAIT_NOTICE_S:
            noticed = waited
            on_wait(LockInfo(os.getpid(), socket.gethostname(), None, command), waited)
    try:
        if hold.depth == 0:
            lock = ProcessLock(store_lock_path(home), command=command)
            left = max(0.0, wait_s - (time.monotonic() - started))
            lock.acquire(wait_s=left, on_wait=on_wait)
            hold.lock = lock
        hold.depth += 1
        try:
            yield
        finally:
            hold.depth -= 1
            if hold.depth == 0 and hold.lock is not None:
                hold.lock.release()
                hold.lock = None
    finally:
        hold.thread_lock.release()
