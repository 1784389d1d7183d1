"""Shared pytest fixtures: every fixture that more than one test file uses lives here (plain helper
functions in ``tests/helpers.py``); a fixture that one file uses stays in that file."""

from __future__ import annotations

import os

import pytest
import torch

# Tests run on 2-core CI machines. Run alone (``pytest``), a test process takes both cores. Under
# pytest-xdist (``make test``: one worker per core) each worker takes one intra-op thread, and so do
# the processes the tests start (OMP_NUM_THREADS is torch's default for a new process): two workers
# at two threads each would oversubscribe the cores, and MKL's thread teams stall on small tensors of
# a loaded machine.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture
def one_thread():
    """One intra-op thread for the test (tiny networks: threads only add synchronisation and, on a
    loaded 2-core box, stalls; one thread also makes float sums reproducible). Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def _lock_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("locks")


@pytest.fixture(autouse=True)
def _private_account_locks(_lock_dir, monkeypatch):
    """Machine-wide locks (the paper lock per Alpaca account) live in this test session's own folder:
    the fake Alpaca's account id is the same in every test run on the machine."""
    monkeypatch.setenv("PODRACER_LOCK_DIR", str(_lock_dir))


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh podracer home directory, also exported as PODRACER_HOME."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("PODRACER_HOME", str(path))
    return path


@pytest.fixture
def toy():
    from data.toy import toy_market

    return toy_market(num_steps=780, num_assets=4, num_features=8, seed=0)


#: ``toy_market`` settings of the ``market`` fixture where a module sets neither ``TOY_MARKET`` nor
#: ``SYNTHETIC_MARKET``: one 390-bar session of 4 assets with 3 features.
DEFAULT_TOY_MARKET = {"num_steps": 390, "num_assets": 4, "num_features": 3, "seed": 0}


@pytest.fixture(scope="module")
def market(request):
    """The module's small market, built once per module: ``data.toy.toy_market(**TOY_MARKET)`` from
    the module's ``TOY_MARKET`` settings (``DEFAULT_TOY_MARKET`` where it sets none), or the whole span
    of ``data.loader.synthetic_market(**SYNTHETIC_MARKET)`` where the module sets that instead."""
    synthetic = getattr(request.module, "SYNTHETIC_MARKET", None)
    if synthetic is not None:
        from data.loader import synthetic_market

        return synthetic_market(**synthetic).full
    from data.toy import toy_market

    return toy_market(**getattr(request.module, "TOY_MARKET", DEFAULT_TOY_MARKET))


@pytest.fixture(scope="module")
def windows():
    """Train and validation windows of a five-session toy market (``helpers.toy_windows``)."""
    from helpers import toy_windows

    return toy_windows()


@pytest.fixture(scope="module")
def windows_ppo():
    """Train and validation windows of ``helpers.ppo_market`` (real PPO pods)."""
    from helpers import ppo_market

    train, valid, _test = ppo_market().split_sessions(0.6, 0.2)
    return train, valid


# --- paper trading (tests/test_paper*.py) -------------------------------------------------------------


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A small trained run (``test_paper_support.make_run``) and its exported TorchScript bundle."""
    from test_paper_support import make_run

    from app.export import export_bundle

    home = tmp_path_factory.mktemp("paper-home")
    run = make_run(home)
    bundle_dir = export_bundle(run.run_dir, exporter="torchscript")
    return run, bundle_dir


@pytest.fixture
def env(setup, tmp_path, monkeypatch):
    """A fake Alpaca holding the run's bars, open at a bar of the last session, keys in the env."""
    import pandas as pd
    from alpaca_fake import FakeAlpaca, point_at

    from app.bundle import load_bundle

    run, bundle_dir = setup
    bars = run.bars
    ts = pd.DatetimeIndex(sorted(bars["timestamp"].unique()))
    decision = ts[-390 + 120]  # a bar in the middle of the last session
    now = (decision + pd.Timedelta(minutes=1)).to_pydatetime()
    at = bars[bars.timestamp == decision].set_index("ticker")["close"]
    with FakeAlpaca(prices={t: float(p) for t, p in at.items()}, cash=100_000.0, now=now, bars=bars) as fake:
        point_at(fake, monkeypatch)
        home = tmp_path / "home"
        yield {
            "fake": fake,
            "bundle": load_bundle(bundle_dir),
            "bundle_dir": bundle_dir,
            "home": home,
            "decision": decision,
            "run": run,
        }
