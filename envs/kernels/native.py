"""The training step as one hand-written C kernel on CPU (``envs/kernels/native/step.c``), built on
first use, and the dispatch to it (:func:`kernel`, :func:`step`).

Why by hand (the measurements: docs/benchmarks.md): the step is three dependent passes over each
env's asset row plus a copy of its observation row. torch runs each pass over the whole batch
(inductor: several parallel loops) and the observation gather after them, so every pass streams the
batch through the cache again. The kernel takes one env at a time through all passes while its rows
sit in L1, and prefetches the next env's rows (the step is bound by the latency of those random row
reads), so each row comes from memory once per step, observation included.

The kernel is compiled with the system C compiler (``$CC``, else ``cc``; ``-O3 -march=native
-fopenmp``, no fast-math) into ``$PODRACER_NATIVE_CACHE`` (default ``~/.cache/podracer/native``),
keyed by the source, the flags, the compiler and the CPU, and written atomically. Without a compiler
(or if the build fails) :func:`library` returns ``None`` once with a warning and callers fall back to
``torch.compile``. Its OpenMP threads are torch's (the same ``libgomp`` is loaded in-process).

Only the configuration training uses is native: CPU, float32 prices and per-asset quantities
(``EnvParams.precision="float32"``), no per-asset ``trade_info``, ``unfilled = "drop"`` (the worked
remainder is the torch step's), a market with an observation table.
:func:`supports` says whether a call qualifies, :func:`kernel` whether a step does.

The trading rules stay in :mod:`envs.trading` and :mod:`envs.core`, and :mod:`envs.fast_step`
chooses this kernel: nothing here imports them (``params`` is an ``envs.params.EnvParams``,
``state`` an ``envs.params.EnvState``, read by field name), and the kernel's failures come back as
status codes that ``envs.trading.step`` turns into its errors.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from data.atomic import atomic_path
from data.market import MarketData
from envs import execution, memory
from envs.fees import fee_table
from envs.observation import obs_dim, obs_table
from envs.tradability import fill_modes

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native") / "step.c"  # envs/kernels/native/step.c
CACHE_ENV = "PODRACER_NATIVE_CACHE"
DISABLE_ENV = "PODRACER_NATIVE"  # "0" turns the native kernel off (torch.compile is used instead)
# -fno-math-errno: sqrtf inline and vectorizable (errno is never read); IEEE kept, unlike fast-math.
# Not -fno-trapping-math: it lets the loops with floorf and the NaN-aware selects vectorize, and their
# `omp simd` double reductions then sum in an order that depends on the rows' memory alignment (the
# compiler peels to align), so two identical runs could differ in the last bits.
BASE_FLAGS = (
    "-O3",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fPIC",
    "-shared",
    "-std=gnu11",
)
# Tried in order: a compiler without OpenMP (Apple's clang) gets a one-thread kernel, one that does not
# know -march=native (some ARM compilers) a generic one.
FLAG_VARIANTS = (("-march=native", "-fopenmp"), ("-march=native",), ())

ACTION_MODES = {"weights": 0, "shares": 1}
REWARD_MODES = {"log_return": 0, "return": 1, "diff_sharpe": 2}

_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib": the loaded function or None; "why": why it is None


def cache_dir() -> Path:
    """Where built kernels are kept: ``$PODRACER_NATIVE_CACHE``, else ``~/.cache/podracer/native``
    (``$XDG_CACHE_HOME`` honoured); if that cannot be created, a per-user folder in the temp dir."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        folder = base / "podracer" / "native"
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return folder
    except (OSError, RuntimeError):  # no home, read-only home
        pass
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"podracer-native-{user}"


def _cpu_signature() -> str:
    """The CPU the kernel is built for (``-march=native``): model and flags where Linux says them."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    # x86: vendor, model, flags; ARM: implementer, part, architecture, features.
    fields = (
        "model name",
        "flags",
        "vendor_id",
        "Features",
        "CPU implementer",
        "CPU part",
        "CPU architecture",
    )
    keep = [line for line in text.splitlines()[:60] if line.startswith(fields)]
    return "\n".join([platform.machine(), *keep])


def compiler() -> str | None:
    """The C compiler the kernel is built with (``$CC``, else ``cc``, ``gcc``, ``clang``), if any."""
    argv = _compiler()
    return " ".join(argv) if argv else None


def _compiler() -> list[str] | None:
    """The compiler's command line (``$CC`` may carry arguments, e.g. ``ccache gcc``)."""
    for value in (os.environ.get("CC"), "cc", "gcc", "clang"):
        argv = shlex.split(value) if value else []
        if argv and shutil.which(argv[0]):
            return argv
    return None


class _BuildFailed(Exception):
    pass


def _build(compiler: list[str], fresh: bool = False) -> Path:
    """The built shared library: from the cache, or compiled into it now (the first variant of
    :data:`FLAG_VARIANTS` that compiles)."""
    source = SOURCE.read_bytes()
    version = subprocess.run([*compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    errors = []
    for extra in FLAG_VARIANTS:
        flags = (*BASE_FLAGS, *extra)
        key = hashlib.sha256(
            b"\0".join([source, " ".join(flags).encode(), version.encode(), _cpu_signature().encode()])
        ).hexdigest()[:24]
        target = cache_dir() / f"step-{key}.so"
        if target.exists() and not fresh:
            return target
        try:
            with atomic_path(target, suffix=".so") as tmp:  # a killed build leaves no torn library
                done = subprocess.run(
                    [*compiler, *flags, "-o", str(tmp), str(SOURCE), "-lm"],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                if done.returncode != 0:
                    raise _BuildFailed((done.stderr.strip().splitlines() or ["(no output)"])[0][:200])
        except _BuildFailed as exc:
            errors.append(str(exc))
            continue
        log.info("built the native env step kernel (%s): %s", " ".join(flags), target)
        return target
    raise RuntimeError(f"{' '.join(compiler)} failed: {errors[0] if errors else 'no flags to try'}")


def _load() -> object:
    if os.environ.get(DISABLE_ENV, "1") == "0":
        raise RuntimeError(f"turned off by {DISABLE_ENV}=0")
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("no C compiler (set CC, or install gcc)")
    try:
        lib = ctypes.CDLL(str(_build(compiler)))
    except OSError:  # a cached library that does not load (damaged, foreign): build it again, once
        lib = ctypes.CDLL(str(_build(compiler, fresh=True)))
    fn = lib.podracer_step
    i64, i32, ptr = ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p
    fn.restype = i64
    fn.argtypes = [i64] * 8 + [i32, i32, ptr, i32] + [ptr] * 17 + [ptr] * 18
    return fn


def library() -> object | None:
    """The kernel's entry point, built and loaded on first call; ``None`` if it cannot be (with one
    warning saying why, after which :func:`why_unavailable` says it)."""
    if "lib" in _state:
        return _state["lib"]
    with _lock:
        if "lib" not in _state:
            try:
                _state["lib"] = _load()
            except Exception as exc:  # noqa: BLE001 - any build/load failure means "use torch"
                _state["lib"] = None
                _state["why"] = f"{type(exc).__name__}: {exc}"
                log.warning("native env step unavailable (%s); using torch.compile", _state["why"])
    return _state["lib"]


def why_unavailable() -> str | None:
    """Why :func:`library` returned ``None`` (``None`` if it has not, or was not asked yet)."""
    return _state.get("why")  # type: ignore[return-value]


def supports(params, market, table: Tensor | None) -> bool:
    """Whether a step of ``market`` (on the CPU) with ``params`` can run natively (see the module
    docstring); ``table`` is the market's observation table (``None`` when it has none)."""
    prices = (market.num_steps, market.num_assets)
    return (
        table is not None
        and table.is_contiguous()
        and table.shape == (market.num_steps, obs_dim(market.num_assets, market.num_features))
        and params.precision == "float32"
        and not params.trade_info
        and market.open.dtype == torch.float32
        and market.close.dtype == torch.float32
        and market.open.is_contiguous()
        and market.close.is_contiguous()
        and (
            not params.execution
            or (
                market.expected_volume.dtype == torch.float32
                and market.expected_volume.shape == prices
                and market.expected_volume.device.type == "cpu"
            )
        )
        and market.open.shape == prices
        and market.close.shape == prices
        and market.open.device.type == market.close.device.type == table.device.type == "cpu"
    )


@functools.lru_cache(maxsize=64)
def params_vector(params) -> Tensor:
    """``params`` packed in the order ``step.c``'s ``P_*`` enum reads them."""
    return torch.tensor(
        [
            params.initial_cash,
            params.buy_fee_rate,
            params.slippage_bps * 1e-4,
            params.max_shares,
            params.drawdown_penalty,
            params.reward_scale,
            params.sharpe_eta,
            params.bust_frac,
            params.max_weight,
            params.turnover_penalty,
            execution.half_cost(params),
            params.impact_coef,
            params.min_order_notional,
            params.impact_memory,
            float(params.rounds_fees),
        ],
        dtype=torch.float64,
    )


# --- dispatch ------------------------------------------------------------------------------------
# The state the kernel reads: these dtypes (step.c's int64_t / double / float pointers; double is
# envs.core.ACC_DTYPE), shaped (N,) or (N, A), contiguous, on the CPU.
STATE_DTYPES = {
    "t": torch.int64,
    "cash": torch.float64,
    "shares": torch.float32,
    "value": torch.float64,
    "peak": torch.float64,
    "step_count": torch.int64,
    "sharpe_a": torch.float64,
    "sharpe_b": torch.float64,
    "rng": torch.int64,
    "order": torch.float32,
}

# NativeStep.status below 0: the outputs are garbage and the caller raises.
BAD_ACTION = -1  # an action is NaN or inf
BAD_BAR = -2  # a decision bar lies outside [0, last_bar]


class NativeStep(NamedTuple):
    """One native step: ``envs.core.StepCore``'s fields up to ``traded`` (same names and
    meaning), then the observation and the kernel's status."""

    t: Tensor
    cash: Tensor
    shares: Tensor
    value: Tensor
    peak: Tensor
    step_count: Tensor
    sharpe_a: Tensor
    sharpe_b: Tensor
    rng: Tensor
    order: Tensor
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    done: Tensor
    cost: Tensor
    traded_notional: Tensor
    traded: Tensor
    obs: Tensor  # (N, obs_dim), written by the kernel (the step's final observation)
    status: int  # envs whose episode ended (>= 0), or BAD_ACTION / BAD_BAR


def kernel(market: MarketData, params, state) -> Callable[..., int] | None:
    """The kernel if this step can run on it, else ``None``: the kernel trusts shapes, dtypes,
    layouts and devices, so anything but the env's own layout (which the torch path then accepts or
    rejects with its own error) goes to torch."""
    if market.device.type != "cpu" or not supports(params, market, obs_table(market)):
        return None
    if params.unfilled != "drop":  # the worked remainder (envs.core.work_unfilled) is torch's only
        return None
    num_envs = state.t.shape[0] if state.t.dim() == 1 else -1
    for name, dtype in STATE_DTYPES.items():
        x = getattr(state, name)
        shape = (num_envs, market.num_assets) if name in ("shares", "order") else (num_envs,)
        if x.dtype != dtype or x.shape != shape or x.device.type != "cpu" or not x.is_contiguous():
            return None
    return library()


_PRICE_TABLES: dict[tuple[int, int], tuple[Tensor, Tensor]] = {}


def price_tables(market: MarketData) -> tuple[Tensor, Tensor]:
    """``(open, close)`` copied onto huge pages (:mod:`envs.memory`) for the native step, cached like
    the observation table. Its two random price-row reads per env then rarely miss the TLB, which
    made the native step measurably faster (docs/benchmarks.md); the torch paths showed no gain, so
    only the native step uses them.
    Small tables (the TLB covers them) and other platforms use the market's tensors, uncopied. Like
    the observation table, the copy assumes the market's tensors are not changed in place (MarketData
    is immutable; a changed market is a new one)."""
    if not memory.applies(market.open.numel() * market.open.element_size(), market.device):
        return market.open, market.close
    key = (id(market.open), id(market.close))
    found = _PRICE_TABLES.get(key)
    if found is None:
        found = tuple(
            memory.table_empty(tuple(x.shape), x.dtype, x.device).copy_(x)
            for x in (market.open, market.close)
        )
        _PRICE_TABLES[key] = found
        weakref.finalize(market.open, _PRICE_TABLES.pop, key, None)
        weakref.finalize(market.close, _PRICE_TABLES.pop, key, None)
    return found


_EXECUTION_TABLES: dict[tuple, Tensor] = {}


def execution_table(market: MarketData, params) -> Tensor:
    """``(T, 4A)`` float32, the fill inputs of the native step with the execution model, one row per
    decision bar ``t``: the fill bar ``t + 1``'s open, its volume cap in shares (``max_participation``
    of its volume expected at bar ``t``, ``MarketData.expected_volume``, whole shares in ``"shares"``
    mode, ``+inf`` without a cap), then bar ``t``'s :func:`envs.execution.impact_table` scale and the
    size-free part of the fill's price (:func:`envs.execution.half_cost_table`, or the scalar
    :func:`envs.execution.half_cost` in every entry with ``spread = "fixed"``; the last row's open and
    cap are never read). The caps are computed once per market and cap as ``envs.core._execute``
    computes them per step, so the values are the same; each env reads its four rows as one contiguous
    one, which measured a cheaper step than scattered reads (docs/benchmarks.md). On huge pages like
    :func:`price_tables`; cached while the market's tensors live."""
    whole = params.action_mode == "shares"
    half_table = execution.half_cost_table(market, params)
    key = (
        id(market.open),
        id(market.expected_volume),
        id(market.daily_vol),
        id(market.adv),
        params.max_participation,
        whole,
        id(market.half_spread),
        params.spread,
        params.slippage_bps,
        params.spread_bps,
        params.spread_scale,
    )
    found = _EXECUTION_TABLES.get(key)
    if found is None:
        volume = market.expected_volume
        num_steps, num_assets = volume.shape
        found = memory.table_empty((num_steps, 4 * num_assets), torch.float32, market.device)
        found[:-1, :num_assets] = market.open[1:]
        limit = found[:, num_assets : 2 * num_assets]
        if params.max_participation > 0:
            torch.mul(volume[:-1], params.max_participation, out=limit[:-1])
            if whole:
                limit[:-1].floor_()
        else:
            limit[:-1].fill_(float("inf"))
        found[-1:, : 2 * num_assets].zero_()
        found[:, 2 * num_assets : 3 * num_assets].copy_(execution.impact_table(market))
        half = found[:, 3 * num_assets :]
        if half_table is None:
            half.fill_(execution.half_cost(params))
        else:
            half.copy_(half_table)
        _EXECUTION_TABLES[key] = found
        for x in (market.open, volume, market.daily_vol, market.adv, market.half_spread):
            weakref.finalize(x, _EXECUTION_TABLES.pop, key, None)
    return found


def step(
    fn: Callable[..., int], market: MarketData, params, state, action: Tensor, last_bar: int
) -> NativeStep:
    """``envs.core.step_core`` and the observation in one call of ``fn`` (:func:`kernel`), for a
    float32 contiguous ``action`` (N, A) (its finiteness is checked by the kernel: see
    ``NativeStep.status``); ``last_bar`` is the market's last decision bar."""
    num_envs, num_assets = state.shares.shape
    table = obs_table(market)
    f64, i64 = torch.float64, torch.int64
    t_mark, step_count, rng = (torch.empty(num_envs, dtype=i64) for _ in range(3))
    cash, value, peak, new_a, new_b, cost, notional = (torch.empty(num_envs, dtype=f64) for _ in range(7))
    terminated, truncated, done = (torch.empty(num_envs, dtype=torch.bool) for _ in range(3))
    reward = torch.empty(num_envs, dtype=torch.float32)
    shares, traded, order = (torch.empty_like(state.shares) for _ in range(3))
    obs = torch.empty(num_envs, table.shape[1], dtype=torch.float32)
    open_all, close_all = price_tables(market)
    # The fill modes when some bar is untradable or a cap applies (NULL: the kernel's plain loops).
    modes = None if market.all_tradable and params.max_weight >= 1.0 else fill_modes(market)
    status = fn(
        num_envs,
        num_assets,
        table.shape[1],
        market.num_features,
        market.num_steps,
        params.decision_interval,
        last_bar,
        params.episode_len,
        ACTION_MODES[params.action_mode],
        REWARD_MODES[params.reward],
        params_vector(params).data_ptr(),
        torch.get_num_threads(),
        *(
            x.data_ptr()
            for x in (
                state.t, state.cash, state.shares, state.value, state.peak, state.step_count,
                state.sharpe_a, state.sharpe_b, state.rng, state.order, action, open_all, close_all, table,
            )
        ),
        None if modes is None else modes.data_ptr(),
        execution_table(market, params).data_ptr() if params.execution else None,
        fee_table(market, params).data_ptr(),
        *(
            x.data_ptr()
            for x in (
                t_mark, cash, shares, value, peak, step_count, new_a, new_b, rng, order, reward,
                terminated, truncated, done, cost, notional, traded, obs,
            )
        ),
    )  # fmt: skip
    return NativeStep(
        t_mark, cash, shares, value, peak, step_count, new_a, new_b, rng, order,
        reward, terminated, truncated, done, cost, notional, traded, obs, status,
    )  # fmt: skip
