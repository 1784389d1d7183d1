"""Population rounds back to back: a round's validation and files overlap the next round's training.

A :class:`RoundPipeline` lives in the process that trains populations (the population backend's
worker, or the orchestrator's own process inline). :meth:`RoundPipeline.run` trains a round in the
caller's thread, then hands the rest of it (validation scoring, checkpoint copies, files) to **one**
background thread, the finisher, so rounds finish in the order they trained:

- with ``overlap``, ``run`` returns the *previous* round's outcomes (the finishing that ran while this
  round trained; waiting for it if it is not done) and :meth:`drain` the last round's;
- without it, ``run`` waits for the round's own finishing and returns its outcomes (the same code,
  one round at a time).

On a CUDA device the finisher works on a second CUDA stream, after an event recorded when training
ended, so the next round's kernels queue on the default stream meanwhile; a pod's weights and
optimizer state are copied to pinned host memory (non-blocking, on that stream) before the file
threads write them (:func:`host_result`).

Nothing is dropped: every round handed in comes back, whole and in order, as one outcome per pod; a
finishing that fails fails its round's pods with the cause (a ``RoundError`` each), and a pod whose
files cannot be written fails alone. The orchestrator records a pod only from its outcome, which
exists only once its files are written, so a kill at any moment leaves the leaderboard at its last
recorded state (resume: docs/tournament.md).

Each round's phases gain ``wait_s`` (the trainer waiting for the previous round's finishing) and
``train_share``: training's share of the time since the previous round's training ended, an estimate
of how busy the device was kept (the population's steps are queued on it back to back).
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
#: What a round's training hands back: its phases so far, and the finishing (given ``host_result``).
Trained = tuple[dict[str, float], Callable[[Callable[[TrainResult], TrainResult]], list[Outcome]]]


def _host(tensor: torch.Tensor, pin: bool) -> torch.Tensor:
    """A host copy of ``tensor``: in pinned memory, queued on the current stream (not yet synced), when
    ``pin``; else a plain copy."""
    out = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=pin)
    out.copy_(tensor.detach(), non_blocking=pin)
    return out


def host_result(result: TrainResult, *, copy: bool | None = None) -> TrainResult:
    """``result`` with its policy and optimizer state in host memory (``copy`` None: copied from a
    CUDA device, through pinned staging; the result itself from any other device)."""
    policy = result.policy
    pin = policy.device.type == "cuda"
    if not (pin if copy is None else copy):
        return result
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
    if pin:
        torch.cuda.current_stream().synchronize()  # (the copies above are queued on this stream)
    host = Policy(policy.config, policy.meta, device="cpu", init=False)
    host.load_state_dict(state)
    for name in ("count", "clip", "eps"):  # (not in the state dict)
        setattr(host.obs_norm, name, getattr(policy.obs_norm, name))
    return dataclasses.replace(result, policy=host.eval(), optimizer_state=opt)


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
    """Train rounds in the caller's thread, finish them in one background thread (module docstring)."""

    def __init__(self, overlap: bool, device: str | torch.device = "cpu") -> None:
        self.overlap = bool(overlap)
        self.device = torch.device(device)
        self._finisher = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="population-finisher")
        self._finishing: cf.Future | None = None  # the last round handed to the finisher
        self._stream: Any = None
        self._last_trained: float | None = None  # time.monotonic() when the last training ended

    def run(self, train: Callable[[], Trained], num_pods: int) -> list[Outcome] | None:
        """Train one round of ``num_pods`` pods (``train()``), hand its finishing to the finisher, and
        return the previous round's outcomes (with ``overlap``; None for the first round) or this
        round's (without)."""
        began = time.monotonic()
        try:
            phases, finish = train()
        except Exception as err:  # noqa: BLE001 - the round failed as a whole: every pod of it did
            failed = [as_round_error(err)] * num_pods
            phases, finish = {}, lambda host: failed
        trained_at = time.monotonic()
        ready = self._record()
        previous = self._finishing
        waited = time.monotonic()
        outcomes = self._wait(previous) if previous is not None else None
        if "train_s" in phases:
            phases["wait_s"] = time.monotonic() - waited
            cycle = trained_at - (self._last_trained if self._last_trained is not None else began)
            phases["train_share"] = phases["train_s"] / cycle if cycle > 0 else 1.0
        self._last_trained = trained_at
        self._finishing = self._finisher.submit(self._finish, finish, ready, num_pods)
        if self.overlap:
            return outcomes
        return self.drain()

    def drain(self) -> list[Outcome] | None:
        """The outcomes of the last round handed in (None: there is none, or they were returned)."""
        previous, self._finishing = self._finishing, None
        return self._wait(previous) if previous is not None else None

    def close(self) -> None:
        """Finish what was handed in, then stop the finisher thread."""
        self._finisher.shutdown(wait=True)

    # --- the finisher thread ----------------------------------------------------------------------
    def _record(self) -> Any:
        """An event on the training stream, after the round's last kernel (CUDA only)."""
        if self.device.type != "cuda":
            return None
        event = torch.cuda.Event()
        event.record()
        return event

    def _finish(self, finish: Callable[..., list[Outcome]], ready: Any, num_pods: int) -> list[Outcome]:
        try:
            if ready is None:
                return finish(host_result)
            if self._stream is None:
                self._stream = torch.cuda.Stream(self.device)
            with torch.cuda.stream(self._stream):
                self._stream.wait_event(ready)
                outcomes = finish(host_result)
                self._stream.synchronize()  # (before the round's tensors are let go)
            return outcomes
        except Exception as err:  # noqa: BLE001 - the finishing failed: every pod of the round did
            return [as_round_error(err)] * num_pods

    @staticmethod
    def _wait(future: cf.Future) -> list[Outcome]:
        return future.result()  # (``_finish`` never raises: a failure is its pods' outcomes)
