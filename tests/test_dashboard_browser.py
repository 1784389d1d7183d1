"""A person's view: `podracer dashboard` in a real headless Chromium at a 1400-px window.

Two tests: a year of minute-bar artifacts (first render of the Overview), and every page of a
demo-sized run (12 test sessions, 44 pods, nightly registry, paper journal), an old run with the
default demo's absurd figures, and a run of 400 pods (the Tournament page). They check that no
metric card's label, value or delta is cut (no ellipsis, no horizontal overflow), that no table cell
holds a JSON string, and print each page's render time (target <= 5 s).

Needs Debian's chromium + chromium-driver (`make browser` installs them) and selenium; skipped with
the reason when they are absent. Set PODRACER_SAVE_SCREENSHOT=1 to also copy the screenshots to
docs/img/ (dashboard.png, dashboard-<page>.png).
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
from dashboard_fixture import make_run, make_walkforward_run, write_home_stores

pytestmark = pytest.mark.browser

# Found on PATH, as `make browser` looks for them (Debian installs both in /usr/bin).
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
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
    "--window-size=1400,1000",
)
METRIC = '[data-testid="stMetric"]'
# Plotly charts whose traces are drawn (a chart has several .main-svg layers, so count plots).
DRAWN_PLOTS = (
    "return Array.from(document.querySelectorAll('.js-plotly-plot'))"
    ".filter(p => p.querySelector('.main-svg .trace, .main-svg .hm, .main-svg image')).length"
)


def _skip_reason() -> str | None:
    missing = [
        name for name, found in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if found is None
    ]
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


@contextlib.contextmanager
def _dashboard(home: Path, run: str, tmp_path: Path):
    """`podracer dashboard` over ``home`` on a free port; yields its URL."""
    port = _free_port()
    log = tmp_path / f"dashboard-{port}.log"
    with open(log, "wb") as out:
        # A session of its own, so the whole process group is stopped afterwards.
        proc = subprocess.Popen(
            [*_podracer(), "dashboard", "--home", str(home), "--port", str(port), "--run", run],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
def server(tmp_path):
    """`podracer dashboard` over a home with one year of minute-bar artifacts."""
    home = tmp_path / "home"
    # The real engine and report writer, a decision every 15 minute bars (the default config).
    run_dir = make_run(home, "one-year", days=252, real=True, num_assets=10, decision_interval=15)
    with _dashboard(home, "one-year", tmp_path) as url:
        yield url, run_dir


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
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
    _assert_cards_whole(browser)

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


# --------------------------------------------------------------------------- every page

# A metric card's label, value or delta (or anything inside them) wider than its box, or an ellipsis.
CUT_CARDS = r"""
return Array.from(document.querySelectorAll(
    '[data-testid=stMetricLabel], [data-testid=stMetricValue], [data-testid=stMetricDelta]'))
  .flatMap(el => [el, ...el.querySelectorAll('*')])
  .filter(el => el.scrollWidth > el.clientWidth || (el.innerText || '').includes('\u2026'))
  .map(el => (el.closest('[data-testid=stMetric]') || el).innerText.replace(/\n/g, ' / '));
"""
# Streamlit's grid draws on a canvas and mirrors the cells in an accessible table.
GRID_CELLS = (
    "return Array.from(document.querySelectorAll('[data-testid=stDataFrame] td')).map(td => td.innerText)"
)
# Every table outside a closed expander has drawn its cells (the grid fills them in after the
# page's script ends).
TABLES_DRAWN = (
    "return Array.from(document.querySelectorAll('[data-testid=stDataFrame]'))"
    ".filter(e => !e.closest('details:not([open])')).every(e => e.querySelector('td'))"
)
SCRIPT_IDLE = (
    "const app = document.querySelector('[data-testid=stApp]');"
    "return !!app && app.getAttribute('data-test-script-state') === 'notRunning'"
    " && !document.querySelector('[data-testid=stSkeleton]');"
)
# page path, heading, plotly charts drawn when complete, screenshot name
PAGES = (
    ("", "Overview", 4, "dashboard.png"),
    ("tournament", "Tournament", 2, "dashboard-tournament.png"),
    ("training", "Training", 2, "dashboard-training.png"),
    ("positions", "Positions", 2, "dashboard-positions.png"),
    ("nightly", "Nightly", 1, "dashboard-nightly.png"),
    ("paper", "Paper", 3, "dashboard-paper.png"),
)
# The assertion's bound on one page's full render. The target is 5 s (printed next to each figure);
# the bound is what the suite holds on the shared 2-core machine with parallel test runs.
RENDER_BOUND_S = 20.0


def _assert_cards_whole(browser) -> None:
    cut = browser.execute_script(CUT_CARDS)
    assert not cut, f"metric cards cut off at a 1400-px window: {cut}"


def _grid_cells(browser) -> tuple[list[str], list[str]]:
    """Every drawn cell and header of the page's tables, scrolling each grid sideways: the grid only
    mirrors the columns in view."""
    cells: list[str] = []
    headers: list[str] = []
    grids = browser.execute_script(
        "return Array.from(document.querySelectorAll('[data-testid=stDataFrame] .dvn-scroller'))"
        ".filter(e => !e.closest('details:not([open])'))"
    )
    for grid in grids:
        width, view = browser.execute_script(
            "return [arguments[0].scrollWidth, arguments[0].clientWidth]", grid
        )
        for left in range(0, max(1, width - view + view), max(1, view // 2)):
            browser.execute_script("arguments[0].scrollLeft = arguments[1]", grid, left)
            time.sleep(0.15)  # the grid redraws on the next animation frame
            table = grid.find_element("xpath", "ancestor::*[@data-testid='stDataFrame']")
            cells += browser.execute_script(
                "return Array.from(arguments[0].querySelectorAll('td')).map(td => td.innerText)", table
            )
            headers += browser.execute_script(
                "return Array.from(arguments[0].querySelectorAll('th')).map(th => th.innerText)", table
            )
        browser.execute_script("arguments[0].scrollLeft = 0", grid)
    return cells, headers


def _assert_no_json_cells(browser) -> tuple[int, set[str]]:
    cells, headers = _grid_cells(browser)
    json_like = [c for c in cells if c.strip()[:2] in ('{"', '["', "[{", "[[") or c.strip() in ("{}", "[]")]
    assert not json_like, f"table cells holding JSON: {json_like[:5]}"
    return len(cells), set(headers)


def _render(browser, url: str, heading: str, plots: int) -> float:
    """Open ``url`` and wait for the heading, ``plots`` drawn charts, the tables' cells and an idle
    script (the full render); the seconds taken."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60, poll_frequency=0.05)
    start = time.perf_counter()
    browser.get(url)
    wait.until(lambda d: d.find_elements(By.XPATH, f"//h1[contains(., '{heading}')]"))
    wait.until(
        lambda d: (
            d.execute_script(DRAWN_PLOTS) >= plots
            and d.execute_script(SCRIPT_IDLE)
            and d.execute_script(TABLES_DRAWN)
        )
    )
    seconds = time.perf_counter() - start
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    return seconds


def _scroll_to(browser, element) -> None:
    """Put ``element`` in the middle of the window, without the smooth scrolling a screenshot would catch."""
    browser.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'})", element)
    time.sleep(0.3)


def _save(browser, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get("PODRACER_SAVE_SCREENSHOT") == "1":
        target = REPO / "docs" / "img" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target)
    return shot


@pytest.fixture
def demo_home(tmp_path):
    """A demo-sized run (12 test sessions, 10 assets, 44 pods, metrics.json with pbo and
    num_sessions), an old run with the default demo's absurd figures, a run of 400 pods, a
    walk-forward, and the home's nightly registry and paper journal."""
    home = tmp_path / "home"
    demo = make_run(home, "demo", days=12, num_assets=10, tournament_pods=44)
    make_run(home, "old-demo", days=12, num_assets=10, schema="old", absurd=True)
    make_run(home, "big", days=12, tournament_pods=400)
    make_walkforward_run(home, "wf", days=30, folds=3)
    write_home_stores(home, "demo", demo)
    return home


@pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")
def test_every_page_whole_and_fast(demo_home, browser, tmp_path, capsys):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    times: dict[str, float] = {}
    with _dashboard(demo_home, "demo", tmp_path) as url:
        # Warm the server's imports and the browser's JavaScript cache once, as a first visitor
        # to a started server would have; each page is then timed from navigation to complete.
        _render(browser, f"{url}/?run=demo", "Overview", 4)
        for path, heading, plots, shot in PAGES:
            times[heading] = _render(browser, f"{url}/{path}?run=demo", heading, plots)
            _assert_cards_whole(browser)
            cells, headers = _assert_no_json_cells(browser)
            if heading == "Tournament":
                assert cells > 100, "the leaderboard's cells were not found"
                for column in ("learning rate", "gamma", "clip", "epochs", "Sharpe", "max drawdown", "costs"):
                    assert column in headers, (column, sorted(headers))
            if heading == "Overview":
                assert "edge not measurable: the held-out window has 12 sessions" in browser.page_source
                assert browser.find_elements(By.XPATH, "//*[contains(., 'n/a: window under 63 sessions')]")
            _save(browser, tmp_path, shot)
            if heading == "Paper":
                # The account against the simulator: daily equity and the fill slippage, drawn.
                sim = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")[1]
                assert "paper vs simulator" in sim.text.lower(), sim.text
                _scroll_to(browser, sim)
                _save(browser, tmp_path, "dashboard-paper-sim.png")
            if heading == "Tournament":
                fitness, lineage = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")[:2]
                _scroll_to(browser, fitness)
                _save(browser, tmp_path, "dashboard-fitness.png")
                _scroll_to(browser, lineage)
                # Hover the champion's star: the tooltip names the hyper-parameters it changed.
                star = lineage.find_elements(By.CSS_SELECTOR, ".scatterlayer .trace:last-child .point")
                if star:
                    ActionChains(browser).move_to_element(star[0]).perform()
                    time.sleep(0.3)
                    hover = browser.execute_script(
                        "return (arguments[0].querySelector('.hoverlayer') || {}).textContent || ''", lineage
                    )
                    assert "parent:" in hover, hover
                    _scroll_to(browser, lineage)  # moving to the star scrolled it to the window's edge
                _save(browser, tmp_path, "dashboard-lineage.png")

        # The default demo's figures before the trust change: 3.5M%, Calmar 7.7M, deltas to match.
        times["Overview (old run)"] = _render(browser, f"{url}/?run=old-demo", "Overview", 3)
        _assert_cards_whole(browser)
        values = [e.text for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricValue"]')]
        assert values[1] == "3.5M%" and values[6] == "7.7M", values

        times["Tournament (400 pods)"] = _render(browser, f"{url}/tournament?run=big", "Tournament", 2)
        _assert_no_json_cells(browser)

        # The walk-forward page of a walk-forward run: the account with its folds, the drawdown.
        times["Walk-forward"] = _render(browser, f"{url}/walkforward?run=wf", "Walk-forward", 2)
        _assert_cards_whole(browser)
        cells, headers = _assert_no_json_cells(browser)
        assert {"fold", "gate", "in charge", "test return"} <= headers, sorted(headers)
        _save(browser, tmp_path, "dashboard-walkforward.png")

    with capsys.disabled():
        figures = ", ".join(f"{page} {s:.2f} s" for page, s in times.items())
        print(
            f"\n[dashboard] pages at 1400 px (target <= 5 s each): {figures}; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
    slow = {page: round(s, 2) for page, s in times.items() if s > RENDER_BOUND_S}
    assert not slow, f"pages slower than {RENDER_BOUND_S} s: {slow}"
