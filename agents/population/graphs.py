"""CUDA graphs for the population's hot steps, and the plain eager call everywhere else.

A population's rollout step and minibatch update are a few hundred small kernels each; launched one
by one from Python, the launches cost more than the work (the reason one small PPO run is slower on
a GPU than on a CPU). :class:`StepGraph` wraps such a step, written as a function of no arguments
over tensors that live as long as the population (static buffers: inputs are copied in before a
call, results read out after), and on CUDA records it once as a CUDA graph and replays it with one
launch. On any other device, or with graphs off, it is the same function called eagerly, so the CPU
tests run exactly the code a GPU replays.

The first call runs eagerly on a side stream (it is a real step: the warm-up CUDA graphs need, with
no state to restore afterwards); the second records the graph (recording does not execute) and
replays it; every later call replays. A step that cannot be recorded (a host synchronisation inside,
an unsupported op) logs one warning and stays eager: slower, same results.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger(__name__)


def graphs_supported(device: torch.device) -> bool:
    """Whether CUDA graphs can run on ``device`` (CUDA only; never on the CPU)."""
    return device.type == "cuda" and torch.cuda.is_available()


class StepGraph:
    """``fn()`` over static buffers: eager, or replayed as one CUDA graph (see the module docstring)."""

    def __init__(
        self, fn: Callable[[], Any], device: torch.device, enabled: bool | None = None, name: str = ""
    ) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "step")
        supported = graphs_supported(device)
        if enabled and not supported:
            log.info("CUDA graphs for %s: off (device %s has none)", self.name, device)
        self.enabled = supported if enabled is None else bool(enabled) and supported
        self.graph: Any = None
        self.calls = 0

    @property
    def mode(self) -> str:
        """``"cuda graph"`` once recorded, else ``"eager"``."""
        return "cuda graph" if self.graph is not None else "eager"

    def __call__(self) -> None:
        self.calls += 1
        if not self.enabled:
            self.fn()
            return
        if self.graph is not None:
            self.graph.replay()
            return
        if self.calls == 1:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.fn()
            torch.cuda.current_stream().wait_stream(stream)
            return
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: the population backend's finisher thread may launch work on another
            # stream meanwhile (agents.tournament.round_pipeline); only this thread's calls are captured.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.fn()
        except Exception as err:  # noqa: BLE001 - any recording failure: stay eager, say so once
            log.warning(
                "CUDA graph for %s not recorded (%s: %s); running it eagerly",
                self.name,
                type(err).__name__,
                err,
            )
            self.enabled = False
            self.fn()
            return
        self.graph = graph
        graph.replay()
