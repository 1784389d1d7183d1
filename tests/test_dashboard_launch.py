"""`podracer dashboard` starts Streamlit with a clean import path."""

from __future__ import annotations

import subprocess

from app.dashboard import launch


def test_dashboard_process_ignores_modules_in_the_current_directory(tmp_path):
    """A ``pandas.py`` in the directory the user starts from must not be imported by the server."""
    marker = tmp_path / "shadowed"
    (tmp_path / "pandas.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(97)\n")
    argv = launch.streamlit_command("127.0.0.1", 8599)[:3] + ["--help"]  # the real entry, then exit
    env = launch.streamlit_env(tmp_path, None)
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert not marker.exists(), done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Usage" in done.stdout
