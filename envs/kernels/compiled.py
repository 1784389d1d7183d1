"""Optional ``torch.compile`` of the env's pure tensor functions, with an eager fallback.

Why (the measurements: docs/benchmarks.md): eager torch pays a dispatch per op, and an env step or
a backtest decision is dozens of small ops. Inductor fuses their elementwise work into a few C++
loops, so a training step spends less CPU time outside the observation gather and a one-env backtest
decision (policy + step) runs faster. The price is a compile on first use (seconds, fewer with
inductor's on-disk cache warm) and a C++ compiler at run time, so compiling is a choice
(``"on"``/``"off"``) or decided by the amount of work (``"auto"``).

Compiled results are not bitwise equal to eager ones: fused loops round in a different order, so
float32 per-asset quantities differ by about an ulp, which reaches the float64 accounting as a small
relative difference (``tests/test_compiled.py`` bounds it). Anything that must be bitwise
reproducible against eager (parity tests, ``backtest_step`` vs ``step``) runs eager.

``torch._dynamo`` keeps at most ``torch._dynamo.config.recompile_limit`` (8) compiled variants of one
function per process; past that (e.g. the step compiled for a 9th ``EnvParams`` or batch size), the
compiled call fails and the function runs eagerly from then on, with the warning below.

If compiling fails (no compiler, an inductor error), the call runs eagerly, a warning says why once,
and that function stays eager for the rest of the process.

Nothing here knows the trading rules: :mod:`envs.fast_step` and :mod:`envs.backtest_loop` hand over
their pure functions (:func:`compiled_partial`, :class:`Compiled`).
"""

from __future__ import annotations

import functools
import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any, Literal

import torch

from data.errors import one_line
from envs.params import COMPILE_MODES

log = logging.getLogger(__name__)

CompileMode = Literal["auto", "on", "off"]


def check_mode(mode: str, name: str = "compile") -> CompileMode:
    """``mode`` if it is one of :data:`COMPILE_MODES`, else a ``ValueError`` naming the setting
    (``name``) and the modes."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"{name} must be one of {', '.join(COMPILE_MODES)} (got {mode!r})")
    return mode  # type: ignore[return-value]


class Compiled:
    """``fn`` compiled with ``torch.compile`` (static shapes, one graph), falling back to ``fn``.

    A call that raises inside the compiled path is retried eagerly: if the eager call raises too, that
    error propagates (a genuine error in the inputs, the compiled path stays on); if it succeeds, the
    compiled path was at fault and is switched off for good, with one warning.
    """

    def __init__(self, fn: Callable[..., Any], name: str, dynamic: bool = False) -> None:
        self.eager = fn
        self.name = name
        self.failure: str | None = None
        # dynamic=None (not False) lets torch._dynamo.mark_dynamic make chosen sizes symbolic.
        self._compiled = torch.compile(fn, dynamic=None if dynamic else False, fullgraph=True)

    @property
    def active(self) -> bool:
        """False once compiling failed and calls run eagerly."""
        return self.failure is None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.failure is None:
            try:
                with warnings.catch_warnings():
                    # inductor's advice to enable TF32 on CUDA: we keep float32 matmuls exact
                    warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")
                    return self._compiled(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - any compiler failure falls back to eager
                out = self.eager(*args, **kwargs)  # a genuine input error raises here, as it would eagerly
                self.failure = one_line(exc, 200)
                log.warning("torch.compile of %s failed (%s); running it eagerly", self.name, self.failure)
                return out
        return self.eager(*args, **kwargs)


_CACHE: dict[Any, Compiled] = {}
_LOCK = threading.Lock()


def cached(key: Any, make: Callable[[], Callable[..., Any]], name: str) -> Compiled:
    """The process-wide :class:`Compiled` for ``key`` (built from ``make()`` on first use), so that a
    function is compiled once per process and configuration, not once per caller."""
    with _LOCK:
        found = _CACHE.get(key)
        if found is None:
            found = _CACHE[key] = Compiled(make(), name)
        return found


def compiled_partial(fn: Callable[..., Any], params: Any, name: str) -> Compiled:
    """``functools.partial(fn, params)`` compiled once per process, ``fn`` and ``params`` (hashable),
    e.g. ``envs.core.step_core`` for one ``EnvParams``."""
    return cached((fn, params), lambda: functools.partial(fn, params), name)
