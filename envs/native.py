"""The training step as one hand-written C kernel on CPU (``envs/native/step.c``), built on first use.

Why by hand (measured on a 2-core CPU, 1024 envs x 100 assets, docs/env.md): the step is three
dependent passes over each env's asset row plus a copy of its observation row. torch runs each pass
over the whole batch (inductor: 6 parallel loops, ~280 µs with every operand in cache) and the
observation gather after them (~210-350 µs from DRAM), so every pass streams the batch through the
cache again. The kernel takes one env at a time through all passes while its rows sit in L1, and
prefetches the next env's rows (the step is bound by the latency of those random row reads): ~330 µs
for the whole step, observation included.

The kernel is compiled with the system C compiler (``$CC``, else ``cc``; ``-O3 -march=native
-fopenmp``, no fast-math) into ``$PODRACER_NATIVE_CACHE`` (default ``~/.cache/podracer/native``),
keyed by the source, the flags, the compiler and the CPU, and written atomically. Without a compiler
(or if the build fails) :func:`library` returns ``None`` once with a warning and callers fall back to
``torch.compile``. Its OpenMP threads are torch's (the same ``libgomp`` is loaded in-process).

Only the configuration training uses is native: CPU, float32 prices and per-asset quantities
(``EnvParams.precision="float32"``), no per-asset ``trade_info``, a market with an observation table.
:func:`supports` says whether a call qualifies.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch
from torch import Tensor

from data.atomic import atomic_path

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native") / "step.c"
CACHE_ENV = "PODRACER_NATIVE_CACHE"
DISABLE_ENV = "PODRACER_NATIVE"  # "0" turns the native kernel off (torch.compile is used instead)
BASE_FLAGS = ("-O3", "-ffp-contract=off", "-fPIC", "-shared", "-std=gnu11")
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
    fn.argtypes = [i64] * 8 + [i32, i32, ptr, i32] + [ptr] * 13 + [ptr] * 17
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
        and table.shape == (market.num_steps, 2 + market.num_assets * (1 + market.num_features))
        and params.precision == "float32"
        and not params.trade_info
        and market.open.dtype == torch.float32
        and market.close.dtype == torch.float32
        and market.open.is_contiguous()
        and market.close.is_contiguous()
        and market.open.shape == prices
        and market.close.shape == prices
        and market.open.device.type == market.close.device.type == table.device.type == "cpu"
    )


def params_vector(params) -> Tensor:
    """``params`` packed in the order ``step.c``'s ``P_*`` enum reads them."""
    return torch.tensor(
        [
            params.initial_cash,
            params.cost_rate,
            params.slippage_bps * 1e-4,
            params.max_shares,
            params.drawdown_penalty,
            params.reward_scale,
            params.sharpe_eta,
            params.bust_frac,
        ],
        dtype=torch.float64,
    )
