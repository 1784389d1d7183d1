"""Nightly at the default ``[nightly]`` settings, from a fresh home, night after night on a growing
synthetic market: the shadow book (the default rule) promotes a challenger that trades the planted
signal within a stated number of nights (:data:`PROMOTED_WITHIN`; measured on this seeded market:
night 72, its second challenger, 70 sessions after its creation), and promotes nothing in
:data:`NOISE_NIGHTS` nights on the same market without a signal (8 challengers entered, 4 of them
retired; the rule's size over hundreds of nights is ``benchmarks/anytime_size.py``'s). Slow (about
three minutes on a 2-core machine): the anytime-valid test needs weeks of sessions even for this
strong an edge (2.6% a day over buy-and-hold, daily information ratio about 1.1), so the first
promotion's night depends on the draw: a market of another size (the same seed, 80 sessions) had
none within 60 nights.

The tournament is scripted: every night's challenger is the same hand-set policy, a softmax over the
assets' normalized ``ret_390`` (the feature that sees most of the planted momentum,
``data.synthetic``), so the question is the book's rule on real replays, not learning. Each night
the pipeline runs whole (``app.nightly.pipeline.run_retrain``: the book's entry, replay, tests,
promotion, the registry), and each challenger is replayed through the backtest engine with the
default costs and execution model (``app.nightly.shadow.replay_returns``) on the sessions after its
creation.

The growing market is one synthetic market of ``SESSIONS`` sessions cut at night ``n`` to its first
``FIRST + n`` sessions; features and their normalization are the long market's (fitted on its first
``TRAIN`` sessions, before the first night's last session). A replay is computed once per challenger
on the long market and cut to each night's sessions (:class:`CutReplays`): the engine decides at bar
``t`` on bars up to ``t`` and values each session at its last bar, so the cut equals a replay on the
shorter market, at a fraction of the time.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from agents.networks import NetworkConfig
from agents.policy import Policy, PolicyMeta
from app.config import Config
from app.nightly import shadow
from app.nightly.pipeline import run_retrain
from app.nightly.registry import current_champion
from app.nightly.steps import ChallengerRun, DataSnapshot, Evaluation, RetrainSteps
from data.loader import build_market
from data.synthetic import SyntheticSpec, generate

TICKERS = 20
FIRST = 20  # sessions on the first night (the sessions a fresh home starts from)
SESSIONS = 100  # the long market the nights cut (one draw: its size is part of the seed's market)
NIGHTS = 80  # nights run at most on the planted market
NOISE_NIGHTS = 25  # on the noise market
TRAIN = 12  # the long market's train window: the features' normalization (before night 1's end)
PROMOTED_WITHIN = 80  # nights: the stated bound (measured: see the module docstring)
MOMENTUM_TEMPERATURE = 3.0  # logit per unit of normalized ret_390


def momentum_policy(market, folder: Path) -> Path:
    """A policy whose asset logits are ``MOMENTUM_TEMPERATURE * ret_390`` (normalized), cash at 0."""
    policy = Policy(
        NetworkConfig(market.num_assets, market.num_features, linear_skip=True),
        PolicyMeta(tickers=market.tickers, feature_names=market.feature_names),
    )
    with torch.no_grad():
        weight = torch.zeros_like(policy.net.asset_skip.weight)
        weight[0, 2 + market.feature_names.index("ret_390")] = MOMENTUM_TEMPERATURE  # after 2 book inputs
        policy.net.asset_skip.weight.copy_(weight)
        for layer in (policy.net.actor_readout, policy.net.actor_cash):
            layer.weight.zero_()
            layer.bias.zero_()
    policy.save(folder)
    return folder


class CutReplays:
    """``shadow.replay_returns`` on the long market, once per (policy copy, start), cut to the night's
    sessions (see the module docstring)."""

    def __init__(self, whole) -> None:
        self.whole, self.done, self.replay = whole, {}, shadow.replay_returns

    def __call__(self, config, full, policy_dir, after):
        key = (Path(policy_dir).name, after)
        if key not in self.done:
            self.done[key] = self.replay(config, self.whole, policy_dir, after)
        replay, last = self.done[key], str(full.session_dates()[-1])
        if replay is None:
            return None
        keep = [i for i, d in enumerate(replay.dates) if d <= last]
        if not keep:
            return None
        return shadow.Replay(
            *(tuple(getattr(replay, f)[i] for i in keep) for f in ("dates", "returns", "benchmark"))
        )


def _nights(tmp_path: Path, signal: float, monkeypatch, nights: int) -> tuple[int | None, list[str]]:
    """Run up to ``nights`` nights from a fresh home; returns (the night promoted on, 1-based, or None,
    the verdict reasons)."""
    panel = generate(SyntheticSpec(num_tickers=TICKERS, num_sessions=SESSIONS, seed=0, signal=signal))
    whole = build_market(panel, train_frac=TRAIN / SESSIONS, valid_frac=4 / SESSIONS, source="synthetic").full
    dates = [str(d) for d in np.unique(whole.session_dates())]
    monkeypatch.setattr(shadow, "replay_returns", CutReplays(whole))
    tonight = iter(range(FIRST, SESSIONS + 1))

    def update_data(config, home):
        n = next(tonight)
        market = whole.window(None, dates[n - 1])
        windows = {"train": (dates[0], dates[n - 9]), "valid": (dates[n - 8], dates[n - 5])}
        windows |= {"test": (dates[n - 4], dates[n - 1]), "full": (dates[0], dates[n - 1])}
        return DataSnapshot(splits=SimpleNamespace(full=market), windows=windows, source="synthetic")

    def tournament(config, home, data, champion):
        run_id = f"nightly-{len(list((home / 'runs').glob('*'))) if (home / 'runs').exists() else 0:03d}"
        policy = momentum_policy(whole, home / "runs" / run_id / "champion")
        return ChallengerRun(run_id, home / "runs" / run_id, policy, num_trials=1)

    def evaluate(config, home, data, challenger, champion):  # the fixed-window gate's figures: unused
        return Evaluation("sharpe", data.windows["test"], {"fitness": None}, None, None)

    def export(config, home, challenger):
        folder = home / "exports" / challenger.run_id
        folder.mkdir(parents=True)
        return folder

    home = tmp_path / f"home-{signal}"
    config = Config().with_updates(env={"decision_interval": 15}, retention={"after_retrain": False})
    assert config.nightly == Config().nightly  # the default [nightly]: the shadow book decides
    steps = RetrainSteps(update_data, tournament, evaluate, export)
    reasons = []
    for night in range(1, nights + 1):
        outcome = run_retrain(config, home, steps=steps)
        reasons.append(outcome.reason)
        if outcome.verdict == "promoted":
            assert current_champion(home).run_id == outcome.challenger_run_id
            return night, reasons
    assert current_champion(home) is None
    return None, reasons


@pytest.mark.slow
@pytest.mark.parametrize("signal", [1.0, 0.0])
def test_nightly_at_the_defaults_promotes_the_planted_signal_and_not_noise(tmp_path, monkeypatch, signal):
    night, reasons = _nights(tmp_path, signal, monkeypatch, NIGHTS if signal else NOISE_NIGHTS)
    book = shadow.read_book(tmp_path / f"home-{signal}")
    excess = np.concatenate([np.subtract(c.returns, c.benchmark) for c in book.challengers if c.dates])
    print(f"signal {signal}: promoted on night {night}; challengers' excess over buy-and-hold per session")
    print(f"  mean {excess.mean():+.4f} sd {excess.std():.4f}; book entries {book.entries}; {reasons[-1]}")
    if signal:
        assert night is not None and night <= PROMOTED_WITHIN, reasons[-1]
        assert re.match(r"shadow book: challenger nightly-\d+ \(entry \d+\) passed", reasons[-1])
    else:
        assert night is None, reasons[-1]


def test_a_night_with_no_new_session_after_an_entry_decides_nothing():
    """A challenger entered on the last night no session has followed yet (a weekend, a holiday): the
    book judges it as holding no evidence instead of failing the retrain."""
    book, entered, _ = shadow.enter(shadow.ShadowBook(), "nightly-000", "2030-01-04", "/copies/nightly-000")
    assert entered
    book = shadow.record_sessions(book, [], {"nightly-000": []}, None, [])
    decision = shadow.judge(book)
    assert decision.promote is None and decision.evidence["nightly-000"].sessions == 0
