"""Population rounds back to back: set up, train and finish rounds in three threads, so the device
trains one round after the other while the rounds around it are set up, scored and written.

A :class:`RoundPipeline` lives in the process that trains populations (the population backend's
worker, or the orchestrator's own process inline). :meth:`RoundPipeline.run` sets a round up in the
caller's thread (the parents' checkpoints read, fresh pods built: while the round before trains),
hands its training to **one** trainer thread (rounds train in the order they came), and the trainer
hands the rest (validation scoring, host copies, files) to **one** finisher thread (rounds finish in
the order they trained):

- with ``overlap``, ``run`` returns the *previous* round's outcomes (waiting for its finishing, which
  ran while this round was set up and trained) and :meth:`drain` the last round's;
- without it, ``run`` waits for the round's own outcomes (the same code, one round at a time).

On a CUDA device the finisher works on a second CUDA stream, after an event recorded when training
ended, so the next round's kernels queue on the default stream meanwhile; a round's weights and
optimizer states are copied to pinned host memory on that stream, one synchronisation for all, before
the file threads write them (:func:`host_results`, in the finisher thread: the file threads' own
current stream would be the training one).

Nothing is dropped: every round handed in comes back, whole and in order, as one outcome per pod; a
setup, training or finishing that fails fails its round's pods with the cause (a ``RoundError``
each), and a pod whose files cannot be written fails alone. The orchestrator records a pod only from
its outcome, which exists only once its files are written, so a kill at any moment leaves the
leaderboard at its last recorded state (resume: docs/tournament.md).

Each round's phases gain ``idle_s`` (the trainer's wait for this round since the last one trained)
and ``train_share``: training's share of the time between the ends of two trainings, an estimate of
how busy the device was kept (the population's steps are queued on it back to back).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from agents.policy import Policy
from agents.tournament.pod import PodOutcome, RoundError, as_round_error
from agents.training import TrainResult

Outcome = PodOutcome | RoundError
#: What a round's training hands back: its phases so far, and the finishing (given ``host_results``).
Trained = tuple[dict[str, float], Callable[[Callable[[list[TrainResult]], list[TrainResult]]], list[Outcome]]]
#: What a round's setup hands back: its training, to run on the trainer thread.
Prepared = Callable[[], Trained]


def _host(tensor: torch.Tensor, pin: bool) -> torch.Tensor:
    """A host copy of ``tensor``: in pinned memory, queued on the current stream (not yet synced), when
    ``pin``; else a plain copy."""
    out = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=pin)
    out.copy_(tensor.detach(), non_blocking=pin)
    return out


def host_results(results: list[TrainResult], *, copy: bool | None = None) -> list[TrainResult]:
    """``results`` with their policies and optimizer states in host memory (``copy`` None: copied from
    a CUDA device, through pinned staging on the current stream, then one synchronisation; the results
    themselves from any other device)."""
    staged = []
    for result in results:
        policy = result.policy
        pin = policy.device.type == "cuda"
        if not (pin if copy is None else copy):
            staged.append((result, None, None, False))
            continue
        state = {k: _host(v, pin) for k, v in policy.state_dict().items()}
        opt = result.optimizer_state
        if opt is not None:
            opt = {
                **opt,
                "state": {
                    i: {k: _host(v, pin) if isinstance(v, torch.Tensor) else v for k, v in per.items()}
                    for i, per in opt["state"].items()
                },
            }
        staged.append((result, state, opt, pin))
    if any(pin for *_, pin in staged):
        torch.cuda.current_stream().synchronize()  # (the copies above are queued on this stream)
    out = []
    for result, state, opt, _pin in staged:
        if state is None:
            out.append(result)
            continue
        policy = result.policy
        host = Policy(policy.config, policy.meta, device="cpu", init=False)
        host.load_state_dict(state)
        for name in ("count", "clip", "eps"):  # (not in the state dict)
            setattr(host.obs_norm, name, getattr(policy.obs_norm, name))
        out.append(dataclasses.replace(result, policy=host.eval(), optimizer_state=opt))
    return out


def log_phases(logger: logging.Logger, num_pods: int, outcomes: Any) -> None:
    """One log line per finished population round: where its time went (and, overlapping, how much
    of it training had). Never raises (it runs before the pods' futures are resolved)."""
    try:
        if isinstance(outcomes, BaseException) or not outcomes:
            return
        phases = next((o.phases for o in outcomes if isinstance(o, PodOutcome) and o.phases), None)
        if not phases:
            return
        done = sum(isinstance(o, PodOutcome) for o in outcomes)
        parts = ", ".join(
            f"{k.removesuffix('_s')} {float(v):.1f} s" for k, v in phases.items() if k.endswith("_s")
        )
        if "train_share" in phases:
            parts += (
                f"; training {100 * float(phases['train_share']):.0f}% of the time (device busy, estimated)"
            )
        logger.info(
            "population round of %d pods (%d scored): %s",
            num_pods,
            done,
            parts,
            extra={"phases": dict(phases)},  # (for a handler that sums them: the benchmarks)
        )
    except Exception as err:  # noqa: BLE001 - a log line must not hold up the pods' results
        logger.debug("population round phases not logged: %s", err)


class RoundPipeline:
    """Set up rounds in the caller's thread, train them in one thread, finish them in another (module
    docstring)."""

    def __init__(self, overlap: bool, device: str | torch.device = "cpu") -> None:
        self.overlap = bool(overlap)
        self.device = torch.device(device)
        self._trainer = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="population-trainer")
        self._finisher = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="population-finisher")
        self._handoff: cf.Future | None = None  # the last round handed in: its trainer's future
        self._stream: Any = None
        self._last_trained: float | None = None  # time.monotonic() when the trainer last finished

    def run(self, setup: Callable[[], Prepared], num_pods: int) -> list[Outcome] | None:
        """Set up one round of ``num_pods`` pods (``setup()``, here), queue its training, and return
        the previous round's outcomes (with ``overlap``; None for the first round) or this round's
        (without)."""
        try:
            train = setup()
        except Exception as err:  # noqa: BLE001 - the round failed as a whole: every pod of it did
            train = _failed(err, num_pods)
        previous, self._handoff = self._handoff, self._trainer.submit(self._train, train, num_pods)
        if self.overlap:
            return self._outcomes(previous) if previous is not None else None
        return self.drain()

    def drain(self) -> list[Outcome] | None:
        """The outcomes of the last round handed in (None: there is none, or they were returned)."""
        previous, self._handoff = self._handoff, None
        return self._outcomes(previous) if previous is not None else None

    def close(self) -> None:
        """Train and finish what was handed in, then stop the threads."""
        self._trainer.shutdown(wait=True)
        self._finisher.shutdown(wait=True)

    @staticmethod
    def _outcomes(handoff: cf.Future) -> list[Outcome]:
        # (neither thread's task raises: a failure is its pods' outcomes)
        return handoff.result().result()

    # --- the trainer thread -------------------------------------------------------------------------
    def _train(self, train: Prepared, num_pods: int) -> cf.Future:
        """Train a round, then hand its finishing to the finisher; returns the finisher's future."""
        began = time.monotonic()
        try:
            phases, finish = train()
        except Exception as err:  # noqa: BLE001 - the round failed as a whole: every pod of it did
            phases, finish = _failed(err, num_pods)()
        trained_at = time.monotonic()
        ready = self._record()
        if "train_s" in phases:
            last = self._last_trained
            phases["idle_s"] = max(0.0, began - last) if last is not None else 0.0
            cycle = trained_at - (last if last is not None else began)
            phases["train_share"] = min(1.0, phases["train_s"] / cycle) if cycle > 0 else 1.0
        self._last_trained = trained_at
        return self._finisher.submit(self._finish, finish, ready, num_pods)

    def _record(self) -> Any:
        """An event on the training stream, after the round's last kernel (CUDA only)."""
        if self.device.type != "cuda":
            return None
        event = torch.cuda.Event()
        event.record()
        return event

    # --- the finisher thread ----------------------------------------------------------------------
    def _finish(self, finish: Callable[..., list[Outcome]], ready: Any, num_pods: int) -> list[Outcome]:
        try:
            if ready is None:
                return finish(host_results)
            if self._stream is None:
                self._stream = torch.cuda.Stream(self.device)
            with torch.cuda.stream(self._stream):
                self._stream.wait_event(ready)
                outcomes = finish(host_results)
                self._stream.synchronize()  # (before the round's tensors are let go)
            return outcomes
        except Exception as err:  # noqa: BLE001 - the finishing failed: every pod of the round did
            return [as_round_error(err)] * num_pods


def _failed(err: BaseException, num_pods: int) -> Prepared:
    """A round that failed as a whole: every pod's outcome is the error."""
    failed = [as_round_error(err)] * num_pods
    return lambda: ({}, lambda host: failed)
