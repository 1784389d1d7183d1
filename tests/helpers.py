"""Plain helpers shared by several test files (fixtures live in ``conftest.py``).

Test files import it as ``from helpers import ...`` (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from types import MappingProxyType

import torch

from data.market import MarketData
from data.toy import toy_market
from envs.observation import FEATURES, split_obs
from envs.trading import EnvParams
from envs.vec_env import TradingVecEnv

ROOT = Path(__file__).resolve().parents[1]  # the repository
#: A tiny tournament's env and direct pods (``[env]`` and ``[agent]`` settings) for the tests that run
#: one on ``ppo_market()``: each test adds what it pins.
SMALL_ENV = MappingProxyType({"decision_interval": 5, "episode_len": 16, "num_envs": 8})
SMALL_DIRECT = MappingProxyType(
    {"hidden": 8, "embed": 4, "batch_paths": 8, "holdout_every": 2, "norm_updates": 2}
)  # (read-only: a test copies what it changes)


def file_hashes(root: Path) -> dict[str, str]:
    """SHA-256 of every file below ``root``, keyed by its path relative to ``root``: equal dicts mean
    nothing below ``root`` was written, added or removed."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def rewrite_json(path: Path, **changes) -> None:
    """Edit a stored JSON document in place, as an older or newer writer would have left it: each
    keyword sets that key, or with ``None`` removes it."""
    doc = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    path.write_text(json.dumps(doc))


def flat_liquidity_market(
    price: float, volume: float, daily_vol: float, adv: float, half_spread=None
) -> MarketData:
    """Two assets at a flat ``price`` over 40 bars (20 a session), ``volume`` shares a bar, a known
    trailing volatility and ADV, the expected volume from those bars, and ``half_spread`` (None: the
    estimate from the flat bars, which the floor then sets)."""
    base = toy_market(num_steps=40, num_assets=2, num_features=2, bars_per_session=20, seed=0)
    flat = torch.full_like(base.close, price)
    return dataclasses.replace(
        base,
        open=flat,
        high=flat.clone(),
        low=flat.clone(),
        close=flat.clone(),
        volume=torch.full_like(base.close, volume),
        daily_vol=torch.full_like(base.close, daily_vol),
        adv=torch.full_like(base.close, adv),
        expected_volume=None,
        half_spread=half_spread,
    )


def toy_windows() -> tuple[MarketData, MarketData]:
    """Train and validation windows of a five-session toy market (2 assets, 60 bars a session): the
    smallest market a tournament runs on."""
    market = toy_market(num_steps=60 * 5, num_assets=2, num_features=3, bars_per_session=60, seed=0)
    train, valid, _test = market.split_sessions(0.6, 0.2)
    return train, valid


def ppo_market() -> MarketData:
    """Ten sessions of 3 assets (60 bars a session): the market of the tournament tests with real PPO pods."""
    return toy_market(num_steps=60 * 10, num_assets=3, num_features=4, bars_per_session=60, seed=1)


def toy_env(
    market: MarketData, num_envs: int = 4, *, episode_len: int = 8, seed: int = 0, **params
) -> TradingVecEnv:
    """A small vectorized env over ``market``: a decision every 5 bars, ``episode_len`` decisions."""
    return TradingVecEnv(
        market,
        EnvParams(decision_interval=5, episode_len=episode_len, **params),
        num_envs=num_envs,
        seed=seed,
    )


def module_name(path: Path) -> str:
    """The dotted module name of a ``.py`` file of the repository (a package's ``__init__.py`` names
    the package)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def long_positive_first_feature(num_assets: int, num_features: int):
    """A policy ``obs -> weights``: equal weights on the assets whose first feature is positive, the
    rest in cash (deterministic)."""

    def policy(obs: torch.Tensor) -> torch.Tensor:
        _, per_asset = split_obs(obs, num_assets, num_features)
        held = (per_asset[..., FEATURES][..., 0] > 0).float()
        return held / held.sum(dim=1, keepdim=True).clamp(min=1.0)

    return policy
