"""`podracer dashboard`: serve the Streamlit dashboard over the home's artifacts (read only)."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
from pathlib import Path

import typer

from app import context
from data.errors import PodracerError

APP_PATH = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
HOME_ENV = "PODRACER_HOME"
RUN_ENV = "PODRACER_DASHBOARD_RUN"


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

    ``app.dashboard.serve`` is ``streamlit run app/dashboard/app.py`` plus a warm-up of the heavy
    imports at server start (so the first page load does not pay for them).
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
    """The environment of the Streamlit process: the home and the run to open first."""
    env = dict(os.environ)
    env[HOME_ENV] = str(home)
    if run:
        env[RUN_ENV] = run
    else:
        env.pop(RUN_ENV, None)
    # The dashboard must import this very checkout's packages even outside an editable install.
    root = str(APP_PATH.parent.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def dashboard(
    home: Path = typer.Option(
        None,
        "--home",
        help="Home directory to read (default: the global --home / $PODRACER_HOME).",
        show_default=False,
    ),
    port: int = typer.Option(8501, "--port", min=1, max=65535, help="Port to serve on."),
    run: str = typer.Option(
        None, "--run", help="Run to open first (default: the newest).", show_default=False
    ),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Address to bind; anything but loopback exposes your results to the network.",
    ),
) -> None:
    """Serve the dashboard (champion vs buy-and-hold, tournament, training, positions, nightly, paper)."""
    home_dir = (Path(home).expanduser() if home else context.home()).resolve()
    if not home_dir.is_dir():
        raise PodracerError(f"home {home_dir} does not exist: run `podracer demo` or pass --home")
    if run and not (home_dir / "runs" / run).is_dir():
        raise PodracerError(f"no run {run!r} under {home_dir / 'runs'}")
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
