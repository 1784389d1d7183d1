"""The pair screen of the product candidate's design study (benchmarks/start_products.py): the plain
screen and its bagged form find a planted product, and the bagged shares are a distribution."""

import math

import torch

from backtests.linear import DecisionRows
from benchmarks.start_products import BAG_DRAWS, bagged_pairs, screened_product


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
