"""A person's view: `podracer dashboard` in a real headless Chromium on a year of minute-bar artifacts.

Needs Debian's chromium + chromium-driver (`make browser` installs them) and selenium; skipped with
the reason when they are absent. Prints the time to first full render (target <= 5 s). Set
PODRACER_SAVE_SCREENSHOT=1 to also copy the screenshot to docs/img/dashboard.png.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from dashboard_fixture import make_run

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REPO = Path(__file__).resolve().parent.parent
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1600,1100",
)
METRIC = '[data-testid="stMetric"]'
# Plotly charts whose traces are drawn (a chart has several .main-svg layers, so count plots).
DRAWN_PLOTS = (
    "return Array.from(document.querySelectorAll('.js-plotly-plot'))"
    ".filter(p => p.querySelector('.main-svg .trace, .main-svg .hm, .main-svg image')).length"
)


def _skip_reason() -> str | None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        return f"{' and '.join(missing)} not installed (run `make browser`)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _podracer() -> list[str]:
    script = Path(sys.executable).with_name("podracer")
    return (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]
    )


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"podracer dashboard exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply,
        ):
            if reply.status == 200:
                return
        time.sleep(0.2)
    pytest.fail(f"the dashboard did not come up in {timeout:.0f} s: {log.read_text()[-2000:]}")


@pytest.fixture
def server(tmp_path):
    """`podracer dashboard` on a free port over a home with one year of minute-bar artifacts."""
    home = tmp_path / "home"
    # The real engine and report writer, a decision every 15 minute bars (the default config).
    run_dir = make_run(home, "one-year", days=252, real=True, num_assets=10, decision_interval=15)
    port = _free_port()
    log = tmp_path / "dashboard.log"
    with open(log, "wb") as out:
        # A session of its own, so the whole process group is stopped afterwards.
        proc = subprocess.Popen(
            [*_podracer(), "dashboard", "--home", str(home), "--port", str(port), "--run", "one-year"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url, run_dir
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")
def test_dashboard_in_a_real_browser(server, browser, tmp_path, capsys, record_property):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, run_dir = server
    metrics = json.loads((run_dir / "backtest" / "metrics.json").read_text())
    wait = WebDriverWait(browser, 60, poll_frequency=0.05)

    start = time.perf_counter()
    browser.get(url)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, METRIC)) >= 16)
    cards_s = time.perf_counter() - start
    wait.until(lambda d: d.execute_script(DRAWN_PLOTS) >= 1)
    first_chart_s = time.perf_counter() - start
    # Full render: the equity, underwater and monthly-returns charts all drawn.
    wait.until(lambda d: d.execute_script(DRAWN_PLOTS) >= 3)
    full_s = time.perf_counter() - start

    labels = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]')
    visible = {e.text.strip() for e in labels if e.is_displayed()}
    for label in ("Sharpe", "Max drawdown", "Calmar"):
        assert label in visible, f"{label!r} not visible; saw {sorted(visible)}"
    values = [e.text.strip() for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricValue"]')]
    champion = metrics["strategies"]["champion"]
    assert values[3] == f"{champion['sharpe_ratio']:.2f}"
    assert values[5] == f"{champion['max_drawdown'] * 100:.2f}%"
    assert values[6] == f"{champion['calmar_ratio']:.2f}"
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')

    shot = tmp_path / "dashboard.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get("PODRACER_SAVE_SCREENSHOT") == "1":
        target = REPO / "docs" / "img" / "dashboard.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target)

    # A second visit: the loaders' cache and the browser's JS cache are warm.
    start = time.perf_counter()
    browser.get(url)
    wait.until(
        lambda d: d.execute_script(DRAWN_PLOTS) >= 3 and len(d.find_elements(By.CSS_SELECTOR, METRIC)) >= 16
    )
    warm_s = time.perf_counter() - start

    # A deep link renders inside the app (navigation, sidebar), not as a bare page script.
    browser.get(f"{url}/positions")
    wait.until(lambda d: d.find_elements(By.XPATH, "//h1[contains(., 'Positions')]"))
    nav = {e.text.strip() for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a')}
    assert {"Overview", "Tournament", "Positions & trades", "Paper trading"} <= nav, nav
    assert browser.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebar"] [data-testid="stSelectbox"]')

    record_property("first_full_render_s", round(full_s, 2))
    with capsys.disabled():
        print(
            f"\n[dashboard] one year of minute bars ({run_dir.name}): first render "
            f"cards {cards_s:.2f} s, first chart {first_chart_s:.2f} s, full {full_s:.2f} s "
            f"(target <= 5 s); warm reload {warm_s:.2f} s; load average {os.getloadavg()[0]:.1f} "
            f"on {os.cpu_count()} CPUs; screenshot {shot}"
        )
    assert full_s < 60
