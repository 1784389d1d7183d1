"""Start the dashboard server: checks, then ``python -m app.dashboard.serve`` with the home and run.

Used by ``podracer dashboard`` and ``podracer demo --serve``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
from pathlib import Path

from app import context
from app.runs import RunDir, runs_root
from data.errors import PodracerError

# The Streamlit entry script (``streamlit run`` takes a file path, not a module).
APP_PATH = Path(__file__).resolve().parent / "streamlit_app.py"
HOME_ENV = "PODRACER_HOME"
RUN_ENV = "PODRACER_DASHBOARD_RUN"
# The checkout (or site-packages folder) that holds the ``app`` package.
ROOT = APP_PATH.parent.parent.parent


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``: addresses no other machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port`` (so Streamlit would fail to bind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host if host not in ("0.0.0.0", "::") else "127.0.0.1", port)) == 0


def streamlit_command(host: str, port: int) -> list[str]:
    """The argv that starts the dashboard with the current interpreter's Streamlit.

    ``app.dashboard.serve`` is ``streamlit run app/dashboard/streamlit_app.py`` plus a warm-up of the
    heavy imports at server start (so the first page load does not pay for them).
    """
    return [
        sys.executable,
        "-m",
        "app.dashboard.serve",
        "--server.headless",
        "true",
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        # The app only reads artifacts: no file watcher needed, and it costs CPU on big homes.
        "--server.fileWatcherType",
        "none",
        "--global.developmentMode",
        "false",
        # Viewers, not developers: no "Deploy" button or rerun menu.
        "--client.toolbarMode",
        "viewer",
    ]


def streamlit_env(home: Path, run: str | None) -> dict[str, str]:
    """The environment of the Streamlit process: the home, the run to open first, and PYTHONPATH."""
    env = dict(os.environ)
    env[HOME_ENV] = str(home)
    if run:
        env[RUN_ENV] = run
    else:
        env.pop(RUN_ENV, None)
    # Streamlit runs the entry as a script: the packages it imports must be importable from any
    # working directory, even without an install of this checkout.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    # ``python -m`` puts the current directory first on sys.path: a ``pandas.py`` (or ``app/``) lying
    # there would be imported instead of the real one. PYTHONSAFEPATH (Python 3.11+, what ``-P``
    # does) leaves it out; the checkout is reached through PYTHONPATH above.
    env["PYTHONSAFEPATH"] = "1"
    return env


def serve_dashboard(home: Path, *, port: int, run: str | None, host: str) -> None:
    """Check the home, run and port, then become (posix) or run the Streamlit server."""
    home_dir = Path(home).expanduser().resolve()
    if not home_dir.is_dir():
        raise PodracerError(f"home {home_dir} does not exist: run `podracer demo` or pass --home")
    if run and not RunDir(home_dir, run).exists():
        raise PodracerError(f"no run {run!r} under {runs_root(home_dir)}")
    if not is_loopback(host):
        context.err_console.print(
            f"[bold yellow]warning:[/] binding {host}: the dashboard has no authentication and anyone "
            "who can reach this address can read your results",
            highlight=False,
        )
    if port_in_use(host, port):
        raise PodracerError(f"port {port} on {host} is already in use: pass --port")
    context.console.print(f"podracer dashboard on http://{host}:{port}  (home {home_dir}; Ctrl+C stops)")
    argv, env = streamlit_command(host, port), streamlit_env(home_dir, run)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        # Become the Streamlit process: Ctrl+C, SIGTERM and the exit status then reach it directly,
        # and no orphaned server is left behind when a supervisor stops this pid.
        try:
            os.execve(argv[0], argv, env)
        except OSError as err:
            raise PodracerError(f"cannot start streamlit: {err}") from err
    try:
        rc = subprocess.call(argv, env=env)
    except KeyboardInterrupt:
        rc = 0
    except OSError as err:
        raise PodracerError(f"cannot start streamlit: {err}") from err
    if rc not in (0, 130):
        raise PodracerError(f"streamlit exited with status {rc}")
