"""Where pod rounds run: inline, in local worker processes, or as Ray tasks.

Every backend takes a round function and a :class:`~agents.tournament.pod.RoundContext` once
(``start``), then runs :class:`~agents.tournament.pod.PodTask` s (``submit``) and hands back a
``concurrent.futures.Future`` per task whose result is a ``PodOutcome`` or a ``RoundError`` (a
failed pod is a value, not an exception, so nothing depends on how a backend wraps errors). A future
that raises means the worker itself was lost (killed process, dead Ray node); the orchestrator
records the pod as failed either way. ``room(requested, in_flight)`` says how many pods may be in
flight right now (``requested``: the run's ``tournament.pods``, None for the backend's own count): the Ray backend asks ``ray.cluster_resources()`` and ``ray.available_resources()``
every time, so nodes that join or leave grow or shrink the pool. ``kill(future)`` stops a round
that has hung (the orchestrator's ``round_timeout_s``) and frees its worker. ``flush()`` says that
nothing more will be submitted for now (the orchestrator calls it after each round of launches): a
backend that batches pods (``population``) starts what it has collected; the others run each pod
as it is submitted and ignore it.

- ``local`` with ``workers=0``: inline, one pod at a time in this process (debugging, tests).
- ``local`` with ``workers=W``: a ``ProcessPoolExecutor`` of W spawned processes; the context is
  sent once per worker (initializer), torch intra-op threads are split across workers, and a
  worker whose orchestrator dies exits by itself (no orphans after a kill -9).
- ``ray``: one Ray task per pod round, ``num_cpus`` each and a GPU fraction when the cluster has
  GPUs (pods share a GPU); the context goes to the object store once.
- ``population``: pods trained in batches on one device (:mod:`agents.tournament.population_backend`).
- ``auto``: ``population`` for PPO on a CUDA device, else ``local``
  (:mod:`agents.tournament.backend_choice`, where a run's backend is built).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import logging
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

import torch

from agents.tournament.pod import PodOutcome, PodTask, RoundContext, RoundError, RoundFn, execute_round
from data.errors import ConfigError, PodracerError

log = logging.getLogger(__name__)


def host_copy(ctx: RoundContext) -> RoundContext:
    """The context with its market data on the CPU: what is pickled to workers or put in Ray's object
    store (each round moves it to ``ctx.device``; pickling device tensors would tie workers to it)."""
    return dataclasses.replace(ctx, train=ctx.train.to("cpu"), valid=ctx.valid.to("cpu"))


def run_round_safely(round_fn: RoundFn, task: PodTask, ctx: RoundContext) -> PodOutcome | RoundError:
    """``execute_round`` with the failure returned as a value (what every backend runs)."""
    try:
        return execute_round(round_fn, task, ctx)
    except RoundError as err:
        return err


class Backend(Protocol):
    """What the orchestrator needs from a place to run pod rounds."""

    name: str

    def start(self, round_fn: RoundFn, ctx: RoundContext) -> None: ...

    def room(self, requested: int | None, in_flight: int) -> int: ...

    def submit(self, task: PodTask) -> cf.Future: ...

    def running_since(self, future: cf.Future) -> float | None:
        """``time.monotonic()`` when the round behind ``future`` began running (None: not yet)."""
        ...

    def kill(self, future: cf.Future) -> None:
        """Stop the round behind ``future`` (hung) and free its worker; the pod is failed by the caller."""
        ...

    def flush(self) -> None:
        """Nothing more will be submitted for now: start any pods held back to run together."""
        ...

    def close(self, abort: bool = False) -> None: ...


class InlineBackend:
    """Runs each round synchronously in this process (``--workers 0``)."""

    name = "inline"

    def __init__(self) -> None:
        self._round_fn: RoundFn | None = None
        self._ctx: RoundContext | None = None

    def start(self, round_fn: RoundFn, ctx: RoundContext) -> None:
        self._round_fn, self._ctx = round_fn, ctx

    def room(self, requested: int | None, in_flight: int) -> int:
        # One at a time, so every new pod is generated from an up-to-date board.
        return 1

    def submit(self, task: PodTask) -> cf.Future:
        assert self._round_fn is not None and self._ctx is not None, "start() first"
        future: cf.Future = cf.Future()
        future.set_result(run_round_safely(self._round_fn, task, self._ctx))
        return future

    def running_since(self, future: cf.Future) -> float | None:
        return None  # never running when anyone asks: submit() returns a finished future

    def kill(self, future: cf.Future) -> None:
        pass  # rounds run synchronously: a future is always done before anyone could time it out

    def flush(self) -> None:
        pass  # every pod runs as it is submitted

    def close(self, abort: bool = False) -> None:
        pass


# --- local worker processes ----------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def exit_with_parent(parent_pid: int) -> None:
    """In a worker process: exit as soon as the process ``parent_pid`` is gone (a thread polls).

    A ``ProcessPoolExecutor`` worker blocks forever on its queue if the orchestrator is killed with
    -9; this makes a killed run leave no orphans.
    """

    def watch_parent() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch_parent, daemon=True, name="parent-watch").start()


def _init_worker(
    round_fn: RoundFn, ctx: RoundContext, threads: int, parent_pid: int, started: Any = None
) -> None:
    torch.set_num_threads(threads)
    _WORKER["round_fn"], _WORKER["ctx"], _WORKER["started"] = round_fn, ctx, started
    exit_with_parent(parent_pid)


def _worker_round(task: PodTask) -> PodOutcome | RoundError:
    if _WORKER.get("started") is not None:
        # When the round really starts (a fresh pool spends seconds spawning and importing torch
        # first): the round timeout counts from here. CLOCK_MONOTONIC is system-wide.
        _WORKER["started"].put((task.spec.pod_id, time.monotonic()))
    return run_round_safely(_WORKER["round_fn"], task, _WORKER["ctx"])


class ProcessBackend:
    """A pool of ``workers`` spawned processes, torch threads split across them."""

    name = "local"

    def __init__(self, workers: int, threads_per_worker: int | None = None) -> None:
        if workers < 1:
            raise ConfigError(f"tournament.workers must be >= 1 for worker processes, got {workers}")
        self.workers = workers
        self.threads = threads_per_worker or max(1, (os.cpu_count() or 1) // workers)
        self._executor: cf.ProcessPoolExecutor | None = None
        self._args: tuple[Any, ...] = ()
        self._started_q: Any = None  # (pod_id, monotonic start) from the workers
        self._since: dict[str, float] = {}
        self._pod_of: dict[cf.Future, str] = {}

    def start(self, round_fn: RoundFn, ctx: RoundContext) -> None:
        self._args = (round_fn, host_copy(ctx), self.threads, os.getpid())
        self._executor = self._new_executor()

    def _new_executor(self) -> cf.ProcessPoolExecutor:
        # spawn: a fresh interpreter per worker; fork after torch has started threads can deadlock.
        mp = multiprocessing.get_context("spawn")
        # A fresh queue per pool: a worker killed while writing could leave the old one locked.
        self._started_q = mp.SimpleQueue()
        return cf.ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=mp,
            initializer=_init_worker,
            initargs=(*self._args, self._started_q),
        )

    def running_since(self, future: cf.Future) -> float | None:
        while self._started_q is not None and not self._started_q.empty():
            pod_id, at = self._started_q.get()
            self._since[pod_id] = at
        pod_id = self._pod_of.get(future)
        return None if pod_id is None else self._since.get(pod_id)

    def room(self, requested: int | None, in_flight: int) -> int:
        # More pods than workers would only queue, and be generated from an older board.
        return self.workers if requested is None else min(requested, self.workers)

    def submit(self, task: PodTask) -> cf.Future:
        if self._executor is None:
            raise PodracerError("ProcessBackend: start() first")
        try:
            future = self._executor.submit(_worker_round, task)
        except cf.process.BrokenProcessPool:
            # A worker died (OOM killer, segfault): its pods were already failed through their
            # futures; replace the pool and go on.
            log.warning("a worker process died; restarting the worker pool")
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = self._new_executor()
            future = self._executor.submit(_worker_round, task)
        self._pod_of[future] = task.spec.pod_id
        future.add_done_callback(lambda f: self._pod_of.pop(f, None))
        return future

    def kill(self, future: cf.Future) -> None:
        """Kill the pool's processes and start a fresh pool.

        A ProcessPoolExecutor cannot stop one task, and the death of any worker breaks the whole
        pool anyway: the other rounds in flight fail as "worker lost" (recorded, never scored).
        """
        if self._executor is None or future.done():
            return
        log.warning("killing the worker pool to stop a hung pod round")
        for process in list(getattr(self._executor, "_processes", {}).values()):  # no public handle
            process.kill()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor = self._new_executor()

    def flush(self) -> None:
        pass  # every pod runs as it is submitted

    def close(self, abort: bool = False) -> None:
        """Stop the workers; ``abort`` (an error or Ctrl-C) does not wait for rounds in progress."""
        if self._executor is not None:
            self._executor.shutdown(wait=not abort, cancel_futures=True)
            self._executor = None


# --- Ray -----------------------------------------------------------------------------------------


def import_ray() -> Any:
    """The ``ray`` module, or a one-line error saying how to install it (ray is an optional extra)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("the ray backend needs ray: pip install 'podracer[ray]'") from None
    return ray


def join_ray(ray: Any, address: str | None, init_kwargs: Mapping[str, Any]) -> bool:
    """Connect this process to the Ray cluster at ``address`` (a local one when None) unless it is
    connected already; True when this call started the connection (the caller shuts it down)."""
    if ray.is_initialized():
        return False
    kwargs = {"include_dashboard": False, "log_to_driver": False, **init_kwargs}
    try:
        ray.init(address=address, **kwargs)
    except ConnectionError as err:
        raise ConfigError(f"cannot join the Ray cluster at {address}: {err}") from None
    return True


def _ray_round(
    round_fn: RoundFn, task: PodTask, ctx: RoundContext, threads: int, started: Any = None
) -> PodOutcome | RoundError:
    if started is not None:
        started.put(task.spec.pod_id)  # the round begins (a fresh Ray worker first imports torch)
    torch.set_num_threads(threads)
    return run_round_safely(round_fn, task, ctx)


class RayBackend:
    """Each pod round is a Ray task; the pool follows the cluster's free resources."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        cpus_per_pod: float = 1.0,
        gpus_per_pod: float | None = None,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.address = address
        self.cpus_per_pod = cpus_per_pod
        self.gpus_per_pod = gpus_per_pod
        self.init_kwargs = dict(init_kwargs or {})
        self._owns_ray = False
        self._remote: Any = None
        self._round_fn: RoundFn | None = None
        self._ctx_ref: Any = None
        self._refs: dict[cf.Future, Any] = {}  # future -> Ray object ref (to cancel a hung round)
        self._pod_of: dict[cf.Future, str] = {}
        self._since: dict[str, float] = {}  # pod_id -> driver's monotonic time its start was seen
        self._started_q: Any = None

    def start(self, round_fn: RoundFn, ctx: RoundContext) -> None:
        ray = import_ray()
        self._owns_ray = join_ray(ray, self.address, self.init_kwargs) or self._owns_ray
        gpus = float(ray.cluster_resources().get("GPU", 0.0))
        if self.gpus_per_pod is None:
            # Co-locate pods on the GPUs: a fraction small enough for every requested pod.
            self.gpus_per_pod = 0.0
            if gpus > 0:
                self.gpus_per_pod = 0.25 if gpus < 4 else 1.0
        self._round_fn = round_fn
        self._ctx_ref = ray.put(host_copy(ctx))  # one copy of the market data in the object store
        threads = max(1, int(self.cpus_per_pod))
        self._threads = threads
        self._remote = ray.remote(_ray_round).options(
            num_cpus=self.cpus_per_pod, num_gpus=self.gpus_per_pod, max_retries=0
        )
        from ray.util.queue import Queue

        # Rounds say when they start; the driver stamps them on receipt (its own clock: nodes' clocks
        # need not agree), so the round timeout never counts a worker's start-up.
        self._started_q = Queue(actor_options={"num_cpus": 0})

    def room(self, requested: int | None, in_flight: int) -> int:
        import ray

        def slots(resources: dict[str, float]) -> int:
            n = math.floor(resources.get("CPU", 0.0) / self.cpus_per_pod + 1e-9)
            if self.gpus_per_pod:
                n = min(n, math.floor(resources.get("GPU", 0.0) / self.gpus_per_pod + 1e-9))
            return n

        # The cluster's size bounds the pool (nodes joining or leaving change it); the free
        # resources leave room for other jobs on a shared cluster. Ray reports a task's resources
        # as used only once it is scheduled, so the free count alone would over-submit.
        pool = min(slots(ray.cluster_resources()), in_flight + slots(ray.available_resources()))
        if requested is not None:
            pool = min(pool, requested)
        # At least one pod in flight, so a momentarily busy cluster still makes progress.
        return max(1, pool)

    def submit(self, task: PodTask) -> cf.Future:
        if self._remote is None:
            raise PodracerError("RayBackend: start() first")
        ref = self._remote.remote(self._round_fn, task, self._ctx_ref, self._threads, self._started_q)
        future = ref.future()
        self._refs[future] = ref
        self._pod_of[future] = task.spec.pod_id
        future.add_done_callback(lambda f: (self._refs.pop(f, None), self._pod_of.pop(f, None)))
        return future

    def running_since(self, future: cf.Future) -> float | None:
        if self._started_q is not None:
            now = time.monotonic()
            for pod_id in self._started_q.get_nowait_batch(self._started_q.qsize()):
                self._since.setdefault(pod_id, now)
        pod_id = self._pod_of.get(future)
        return None if pod_id is None else self._since.get(pod_id)

    def kill(self, future: cf.Future) -> None:
        """Force-cancel the hung round's task: Ray kills the worker process running it."""
        import ray

        ref = self._refs.pop(future, None)
        if ref is not None:
            ray.cancel(ref, force=True)

    def flush(self) -> None:
        pass  # every pod runs as it is submitted

    def close(self, abort: bool = False) -> None:
        if self._started_q is not None:
            self._started_q.shutdown()
            self._started_q = None
        if self._owns_ray:
            import ray

            ray.shutdown()
            self._owns_ray = False
