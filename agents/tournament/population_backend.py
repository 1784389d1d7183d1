"""The population backend: the tournament's pods trained in batches, one population per device.

It fits the orchestrator's :class:`~agents.tournament.backends.Backend` protocol. ``room`` offers
room for one population per free lane (``P`` pods, :mod:`agents.population.sizing`); ``submit``
collects pods, hands back their futures, and starts the collected pods as one population round
(:func:`~agents.tournament.population.population_round`) once there are ``P`` of them; ``flush``
(the orchestrator's "nothing more for now", after each round of launches) starts a population that
is not full (the budget's last round). The round's futures resolve together, and no new population
is offered before all of them have been taken in: with one lane the next ``P`` pods are generated
from a leaderboard that holds the whole previous round, so a fixed seed and step budget give the
same run whatever the timing.

With ``overlap`` (``tournament.overlap_rounds``; by default on a CUDA device, whose one worker holds
it) the worker sets a round up while the round before trains, and scores and writes it while the
round after trains (:class:`~agents.tournament.round_pipeline.RoundPipeline`): the job that hands
round k+1 in hands back round k's outcomes, and a new population is offered as soon as round k-1's have been
taken in. So the next ``P`` pods come from a board exactly one population behind, again the same run
whatever the timing. When the orchestrator has room and submits nothing more (the budget is spent),
``flush`` fetches the last round's outcomes (a drain job). A lost worker fails both rounds it held.

Where populations run (``lanes``: populations at once):

- ``workers=0``: inline, in the orchestrator's process (debugging, tests); one lane.
- ``workers>=1`` (the default): spawned worker processes. On a GPU one worker holds the device (one
  lane). On a CPU ``workers`` workers, one lane each, the CPU threads split among them (one thread
  each on the 2-core machine: a population's small ops lose far more to contention between two
  threads on a busy CPU than they gain). A worker's populations (buffers, CUDA graphs) live as long
  as it does; a worker whose orchestrator dies exits by itself; ``kill`` (a hung round) kills the
  workers and starts new ones (another lane's population then fails as "worker lost", as on the
  ``local`` backend). Populations on different lanes run asynchronously, like the ``local``
  backend's pods; with one lane (a GPU, or ``workers`` 1) rounds are in lockstep (or overlap by one).
- ``ray``: each population round is a Ray task with one GPU when the cluster has GPUs (one lane per
  GPU, so a multi-GPU cluster runs that many populations at once), else ``cpus_per_population``
  CPUs. Lanes follow the cluster's resources at every ``room`` call.

A custom round function (tests' fakes) runs each pod of a population through it in turn, with the
same batching, so the orchestrator's behaviour with this backend can be tested cheaply.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import logging
import math
import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from agents.population.sizing import Sizing
from agents.tournament.backends import host_copy, import_ray, join_ray
from agents.tournament.pod import PodTask, RoundContext, RoundError, RoundFn
from agents.tournament.population import with_envs
from agents.tournament.population_worker import (
    Shape,
    choose_size,
    init_worker,
    ray_round,
    ray_size,
    run_population,
    worker_drain,
    worker_round,
    worker_size,
)
from agents.tournament.round_pipeline import RoundPipeline, log_phases
from data.errors import ConfigError, PodracerError

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Batch:
    """One population round in flight."""

    id: int
    tasks: list[PodTask]
    futures: list[cf.Future]
    started: float | None = None  # time.monotonic() when it began running
    handle: Any = None  # the Ray object ref (to cancel it)
    done: bool = False
    killed: bool = False


class PopulationBackend:
    """Pods in populations; see the module docstring."""

    name = "population"

    def __init__(
        self,
        population_size: int = 0,
        *,
        envs_per_pod: int = 0,
        round_steps: int | None = None,
        workers: int = 1,
        ray: bool = False,
        address: str | None = None,
        graphs: bool | None = None,
        overlap: bool | None = None,
        cpus_per_population: float = 1.0,
        init_kwargs: dict[str, Any] | None = None,
        algo: str = "ppo",
    ) -> None:
        if population_size < 0:
            raise ConfigError(f"tournament.population_size must be >= 0, got {population_size}")
        if envs_per_pod < 0:
            raise ConfigError(f"tournament.envs_per_pod must be >= 0, got {envs_per_pod}")
        self.population_size = int(population_size)
        self.shape = Shape(self.population_size, int(envs_per_pod), round_steps, algo)
        self.workers = max(1, int(workers))
        self.mode = "ray" if ray else ("inline" if workers == 0 else "process")
        self.address, self.graphs = address, graphs
        self.overlap = overlap  # (resolved by start(): _choose_overlap)
        self.cpus_per_population = float(cpus_per_population)
        self.init_kwargs = dict(init_kwargs or {})
        self.size = 0
        self.sizing: Sizing | None = None
        self._round_fn: RoundFn | None = None
        self._ctx: RoundContext | None = None
        self._pending: list[tuple[PodTask, cf.Future]] = []
        self._running: list[_Batch] = []
        self._batch_of: dict[cf.Future, _Batch] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._executor: cf.ProcessPoolExecutor | None = None
        self._started_q: Any = None
        self._since: dict[int, float] = {}
        self._owns_ray = False
        self._remote: Any = None
        self._ctx_ref: Any = None
        self._gpus = 0.0
        self._pipeline: RoundPipeline | None = None  # inline: this process's
        self._held: _Batch | None = None  # overlapping: the trained round whose outcomes come next
        self._jobs = 0  # jobs (rounds, drains) running
        self._offered = False  # the last room() offered room

    # --- start ------------------------------------------------------------------------------------
    def start(self, round_fn: RoundFn, ctx: RoundContext) -> None:
        self._round_fn, self._ctx = round_fn, ctx
        if self.mode == "process" and torch.device(ctx.device).type != "cpu":
            self.workers = 1  # one process holds the device (more would time-slice it)
        self.overlap = self._choose_overlap(torch.device(ctx.device))
        if self.mode == "inline":
            self.sizing = choose_size(round_fn, ctx, self.shape, self.graphs)
            self._pipeline = RoundPipeline(self.overlap, ctx.device)
        elif self.mode == "process":
            self._executor = self._new_executor()
            self.sizing = self._executor.submit(worker_size, self.shape).result()
        else:
            self.sizing = self._start_ray(round_fn, ctx)
        self._ctx = with_envs(ctx, self.sizing.num_envs)
        if self.mode == "process" and self.workers > 1 and self._ctx is not ctx:
            # (the sizing worker has the chosen envs per pod; the others get them from a new pool)
            assert self._executor is not None
            self._executor.shutdown(wait=True)
            self._executor = self._new_executor()
        self.size = self.sizing.num_pods
        log.info(self.sizing.describe())

    def _choose_overlap(self, device: torch.device) -> bool:
        """Whether rounds overlap (``overlap_rounds``; None: on a CUDA device with one lane). A round's
        outcomes come back with the next round's job, so it needs the one worker that keeps them."""
        one_lane = self.mode == "inline" or (self.mode == "process" and self.workers == 1)
        if self.overlap is None:
            return one_lane and device.type == "cuda"
        if self.overlap and not one_lane:
            raise ConfigError(
                "tournament.overlap_rounds needs one lane of populations (workers 0 or 1, no address)"
            )
        return bool(self.overlap)

    def _new_executor(self) -> cf.ProcessPoolExecutor:
        assert self._round_fn is not None and self._ctx is not None
        mp = multiprocessing.get_context("spawn")  # (fork after torch started threads can deadlock)
        self._started_q = mp.SimpleQueue()
        return cf.ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=mp,
            initializer=init_worker,
            initargs=(
                self._round_fn,
                host_copy(self._ctx),
                self.graphs,
                max(1, (os.cpu_count() or 1) // self.workers),
                os.getpid(),
                self._started_q,
                bool(self.overlap),
            ),
        )

    def _start_ray(self, round_fn: RoundFn, ctx: RoundContext) -> Sizing:
        ray = import_ray()
        self._owns_ray = join_ray(ray, self.address, self.init_kwargs) or self._owns_ray
        self._gpus = float(ray.cluster_resources().get("GPU", 0.0))
        gpus = 1.0 if self._gpus > 0 else 0.0
        self._ctx_ref = ray.put(host_copy(ctx))
        self._remote = ray.remote(ray_round).options(
            num_cpus=self.cpus_per_population, num_gpus=gpus, max_retries=0
        )
        size = ray.remote(ray_size).options(num_cpus=self.cpus_per_population, num_gpus=gpus, max_retries=0)
        sizing = ray.get(size.remote(round_fn, self._ctx_ref, self.shape, self.graphs))
        self._ctx_ref = ray.put(host_copy(with_envs(ctx, sizing.num_envs)))
        return sizing

    # --- the protocol -----------------------------------------------------------------------------
    def lanes(self) -> int:
        """Populations that may run at once: inline 1, worker processes one each; on Ray, one per
        GPU (or per ``cpus_per_population`` CPUs on a cluster without GPUs)."""
        if self.mode == "inline":
            return 1
        if self.mode == "process":
            return self.workers
        import ray

        resources = ray.cluster_resources()
        if float(resources.get("GPU", 0.0)) > 0:
            return max(1, int(resources["GPU"]))
        return max(1, math.floor(float(resources.get("CPU", 0.0)) / self.cpus_per_population + 1e-9))

    def room(self, requested: int | None, in_flight: int) -> int:
        """Room for the population being collected; none while a finished population's pods have not
        all been taken in, or while every lane runs one. (``requested``, the run's ``pods``, is this
        backend's ``population_size`` already: ``backend_choice.population_pods``.)"""
        with self._lock:
            pending = len(self._pending)
            running = sum(len(b.futures) for b in self._running)
            busy, jobs = len(self._running), self._jobs
        if pending:
            room = in_flight - pending + self.size
        elif in_flight > running:
            room = in_flight
        elif self.overlap:  # a trained round may wait for its outcomes while the next one trains
            room = in_flight + self.size if jobs == 0 and busy <= 1 else in_flight
        else:
            room = in_flight + self.size if busy < self.lanes() else in_flight
        self._offered = room > in_flight
        return room

    def submit(self, task: PodTask) -> cf.Future:
        """Collect ``task``; a full population starts at once (another lane may then be offered)."""
        if self._round_fn is None:
            raise PodracerError("PopulationBackend: start() first")
        future: cf.Future = cf.Future()
        self._pending.append((task, future))
        if len(self._pending) >= self.size:
            self.flush()
        return future

    def flush(self) -> None:
        """Start the collected pods as one population round. With nothing collected after room was
        offered (the budget is spent), an overlapping backend fetches the last round's outcomes."""
        if not self._pending:
            self._drain()
            return
        tasks = [t for t, _ in self._pending]
        futures = [f for _, f in self._pending]
        self._pending = []
        batch = _Batch(next(self._ids), tasks, futures)
        for future in futures:
            self._batch_of[future] = batch
            future.add_done_callback(lambda f: self._batch_of.pop(f, None))
        carried = self._held if self.overlap else None  # (its outcomes come back with this job)
        if self.overlap:
            self._held = batch
        with self._lock:
            self._running.append(batch)
            self._jobs += 1
        if self.mode == "inline":
            assert self._round_fn is not None and self._ctx is not None and self._pipeline is not None
            batch.started = time.monotonic()
            try:
                results: Any = run_population(self._pipeline, self._round_fn, tasks, self._ctx, self.graphs)
            except Exception as err:  # noqa: BLE001 - the batch failed: every pod of it did
                results = err
            self._job_done(batch, carried, results)
            return
        if self.mode == "process":
            job = self._submit_process(batch)
        else:
            batch.handle = self._remote.remote(
                self._round_fn, self._ctx_ref, tasks, self.graphs, self._threads()
            )
            batch.started = time.monotonic()
            job = batch.handle.future()
        job.add_done_callback(lambda f: self._job_done(batch, carried, f))

    def _drain(self) -> None:
        """The held round's outcomes, once the orchestrator had room and submitted nothing."""
        held = self._held
        if held is None or not self._offered or self._jobs:
            return
        self._held = None
        with self._lock:
            self._jobs += 1
        if self.mode == "inline":
            assert self._pipeline is not None
            self._job_done(None, held, self._pipeline.drain())
            return
        assert self._executor is not None
        try:
            job = self._executor.submit(worker_drain)
        except cf.process.BrokenProcessPool as err:
            self._job_done(None, held, err)
            return
        job.add_done_callback(lambda f: self._job_done(None, held, f))

    def _job_done(self, batch: _Batch | None, carried: _Batch | None, job: Any) -> None:
        """A job ended: ``job`` (a result, an exception, or the future of either) holds ``batch``'s
        outcomes, or with overlap ``carried``'s (the round before); a lost worker fails both."""
        with self._lock:
            self._jobs -= 1
        if isinstance(job, cf.Future):
            try:
                job = job.result()
            except BaseException as err:  # noqa: BLE001 - the worker was lost: its rounds' pods fail
                job = err
        if not self.overlap:
            assert batch is not None
            self._resolve(batch, job)
            return
        if isinstance(job, BaseException):
            if batch is not None and self._held is batch:
                self._held = None
            for lost in (carried, batch):
                if lost is not None:
                    self._resolve(lost, job)
            return
        if carried is not None:
            # (None: a new worker, which never saw that round: its outcomes were lost with the old one)
            self._resolve(
                carried, RoundError("worker lost: a new worker holds no outcome") if job is None else job
            )

    def _threads(self) -> int:
        return max(1, int(self.cpus_per_population))

    def _submit_process(self, batch: _Batch) -> cf.Future:
        assert self._executor is not None
        try:
            return self._executor.submit(worker_round, batch.id, batch.tasks)
        except cf.process.BrokenProcessPool:
            log.warning("the population worker died; starting another")
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = self._new_executor()
            return self._executor.submit(worker_round, batch.id, batch.tasks)

    def _resolve(self, batch: _Batch, job: Any) -> None:
        """Hand a finished population's outcomes to its pods' futures (all of them, then nothing else
        is offered until the orchestrator has taken them in: see :meth:`room`)."""
        with self._lock:
            if batch.done:
                return  # (already failed: a killed worker's round)
            if batch in self._running:
                self._running.remove(batch)
            batch.done = True
        if isinstance(job, cf.Future):
            try:
                job = job.result()
            except BaseException as err:  # noqa: BLE001 - the worker was lost: every pod's future raises it
                job = err
        log_phases(log, len(batch.tasks), job)
        for i, future in enumerate(batch.futures):
            if isinstance(job, BaseException):
                future.set_exception(job)
            else:
                future.set_result(job[i])

    def running_since(self, future: cf.Future) -> float | None:
        while self._started_q is not None and not self._started_q.empty():
            batch_id, at = self._started_q.get()
            self._since[batch_id] = at
        batch = self._batch_of.get(future)
        if batch is None:
            return None
        return batch.started if batch.started is not None else self._since.get(batch.id)

    def kill(self, future: cf.Future) -> None:
        """Stop the population of ``future`` (hung): kill its worker (every pod of it fails)."""
        batch = self._batch_of.get(future)
        if batch is None or batch.done or batch.killed:
            return  # (the orchestrator kills every hung pod: the first kill stops the population)
        batch.killed = True
        if self.mode == "process" and self._executor is not None:
            with self._lock:
                for other in self._running:  # (every lane's worker dies with the pool)
                    other.killed = True
            log.warning("killing the population worker to stop a hung round")
            for process in list(getattr(self._executor, "_processes", {}).values()):  # no public handle
                process.kill()
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = self._new_executor()
            held, self._held = self._held, None  # (its outcomes died with the worker)
            if held is not None and not self._jobs:
                self._resolve(held, RoundError("worker killed to stop a hung round"))
        elif self.mode == "ray" and batch.handle is not None:
            import ray

            ray.cancel(batch.handle, force=True)

    def close(self, abort: bool = False) -> None:
        if self._pipeline is not None:
            self._pipeline.close()
            self._pipeline = None
        if self._executor is not None:
            self._executor.shutdown(wait=not abort, cancel_futures=True)
            self._executor = None
        if self._owns_ray:
            import ray

            ray.shutdown()
            self._owns_ray = False
