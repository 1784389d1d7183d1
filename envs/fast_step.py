"""Which step kernel takes an env step: eager torch, the native C kernel or ``torch.compile``.

"Kernel" is the env's word for what runs a step; "backend" is the tournament's, for what runs its
pods (``agents.tournament.backends``).

Two decisions, both here. Per env (``TradingVecEnv(fast_step=...)``, the config's ``[env]
fast_step``): :func:`step_flags` turns ``"auto"``/``"on"``/``"off"`` and the batch into the flags of
``envs.trading.step``. Per step: :func:`choose` says which kernel those flags give for this market,
params and state (the native kernel takes only the configuration training uses, see
:mod:`envs.kernels.native`). Every kernel runs the same rules (:mod:`envs.core`) and equals eager to
float rounding. The measured crossovers behind the thresholds: docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import torch

from data.market import MarketData
from envs.core import StepCore, step_core
from envs.kernels import native
from envs.kernels.compiled import CompileMode, check_mode, compiled_partial
from envs.params import EnvParams, EnvState

# "auto" on a CPU: the native C kernel from this many envs (it beat eager at every batch size measured) ...
NATIVE_MIN_ENVS = 1
# ... and torch.compile, where the kernel cannot run, from this many (its compile repays itself only on
# large batches).
COMPILE_MIN_ENVS = 1024
# "auto" on a GPU: torch.compile from this many envs (below it the compiled step is no faster).
CUDA_COMPILE_MIN_ENVS = 512

StepKernel = Literal["eager", "native", "torch.compile"]


class StepFlags(NamedTuple):
    """The fast-path flags of ``envs.trading.step`` (its keyword arguments of the same names)."""

    fast: bool  # take the fast path: the native kernel on CPU, torch.compile elsewhere
    fallback_to_compile: bool  # a step the native kernel cannot take: torch.compile (else eager)


def step_flags(mode: str, device: torch.device, num_envs: int) -> StepFlags:
    """The flags for a ``fast_step`` mode: ``"on"`` always takes the fast path, ``"off"`` never,
    ``"auto"`` each kernel from its threshold above (below :data:`COMPILE_MIN_ENVS`, a step the
    native kernel cannot take runs eagerly, not compiled)."""
    checked: CompileMode = check_mode(mode, "fast_step")
    big = num_envs >= (COMPILE_MIN_ENVS if device.type == "cpu" else CUDA_COMPILE_MIN_ENVS)
    native_ok = device.type == "cpu" and num_envs >= NATIVE_MIN_ENVS
    fast = checked == "on" or (checked == "auto" and (big or native_ok))
    return StepFlags(fast, checked == "on" or big)


class KernelChoice(NamedTuple):
    """The kernel of one step, and what runs it."""

    name: StepKernel  # "eager" too when compiling failed in this process
    native: Callable[..., int] | None  # the native C kernel (``name == "native"``)
    core: Callable[..., StepCore] | None  # the compiled step core (eager inside once compiling failed)


def choose(
    market: MarketData, params: EnvParams, state: EnvState, fast: bool, fallback_to_compile: bool = True
) -> KernelChoice:
    """The kernel of a step: eager unless ``fast``; then the native kernel where it can take the
    step, else ``torch.compile`` (or eager, without ``fallback_to_compile``)."""
    if not fast:
        return KernelChoice("eager", None, None)
    kernel = native.kernel(market, params, state)
    if kernel is not None:
        return KernelChoice("native", kernel, None)
    if not fallback_to_compile:
        return KernelChoice("eager", None, None)
    core = compiled_partial(step_core, params, "envs.trading.step")
    return KernelChoice("torch.compile" if core.active else "eager", None, core)


def step_kernel(
    market: MarketData, params: EnvParams, state: EnvState, fast: bool, fallback_to_compile: bool = True
) -> StepKernel:
    """Which implementation ``envs.trading.step`` runs for these arguments: ``"eager"``, ``"native"``
    or ``"torch.compile"`` (``"eager"`` too once compiling failed in this process)."""
    return choose(market, params, state, fast, fallback_to_compile).name
