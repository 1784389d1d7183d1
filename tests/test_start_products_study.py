"""The pair screen of the product candidate's design study (benchmarks/start_products.py): the plain
screen and its bagged form find a planted product, and the bagged shares are a distribution."""

import math

import torch

from agents.linear_start import SCREEN_SEED, screen_weights
from backtests.linear import DecisionRows
from benchmarks.start_products import BAG_DRAWS, BAG_SEED, bagged_pairs, pairs, screened_product, standardized


def _panel(seed: int, rows: int = 60, names: int = 50, features: int = 6) -> DecisionRows:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, names, features, generator=gen, dtype=torch.float64)
    y = 0.4 * x[..., 1] * x[..., 4] + torch.randn(rows, names, generator=gen, dtype=torch.float64)
    return DecisionRows(x=x, y=y, ok=torch.ones(rows, names, dtype=torch.bool))


def test_the_plain_and_the_bagged_screen_find_a_planted_product():
    panel = _panel(0)
    pair, sign, t = screened_product(panel)
    assert pair == (1, 4) and sign == 1.0 and t > 3
    shares = bagged_pairs(panel)
    assert math.isclose(sum(shares.values()), 1.0)
    assert max(shares, key=shares.get) == (1, 4) and shares[(1, 4)] > 0.9
    # each share is a whole number of the draws
    assert all(math.isclose(v * BAG_DRAWS, round(v * BAG_DRAWS)) for v in shares.values())


def test_on_noise_the_bagged_screen_spreads_its_picks():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(40, 30, 6, generator=gen, dtype=torch.float64)
    panel = DecisionRows(
        x=x,
        y=torch.randn(40, 30, generator=gen, dtype=torch.float64),
        ok=torch.ones(40, 30, dtype=torch.bool),
    )
    shares = bagged_pairs(panel)
    assert len(shares) > 3 and max(shares.values()) < 0.9
    assert bagged_pairs(panel) == shares  # seeded: the same draws each call
    # the draws are the study's own (BAG_SEED), not the learner's feature screen's (SCREEN_SEED)
    features = DecisionRows(x=x, y=panel.y, ok=panel.ok)
    assert not torch.equal(screen_weights(features, 64, seed=BAG_SEED), screen_weights(features, 64))
    assert torch.equal(screen_weights(features, 64, seed=SCREEN_SEED), screen_weights(features, 64))
    z = standardized(x, panel.ok)
    every = pairs(x.shape[-1])
    products = DecisionRows(
        x=torch.stack([z[..., i] * z[..., j] for i, j in every], dim=-1), y=panel.y, ok=panel.ok
    )
    own = screen_weights(products, BAG_DRAWS, seed=BAG_SEED)
    assert shares == {every[k]: float(own[k]) for k in range(len(every)) if own[k] > 0}
