"""``[data] volume_scale``: the execution model's volumes (the volume cap's expected volume, the
impact's adv) are the bars' times the factor, the bars and features unchanged, every split alike."""

from __future__ import annotations

import torch

from data.loader import load_market


def test_the_scale_multiplies_the_execution_volumes_only():
    base = load_market(source="real-sample")
    iex = load_market(source="real-sample", volume_scale=25.0)  # e.g. IEX at 4% of the tape
    torch.testing.assert_close(iex.full.expected_volume, base.full.expected_volume * 25.0)
    torch.testing.assert_close(iex.full.adv, base.full.adv * 25.0)
    assert torch.equal(iex.full.volume, base.full.volume)
    assert torch.equal(iex.full.features, base.full.features)
    assert torch.equal(iex.full.daily_vol, base.full.daily_vol)
    for name in ("train", "valid", "test"):
        a, b = getattr(iex, name), getattr(base, name)
        assert a.num_steps == b.num_steps
        torch.testing.assert_close(a.adv, b.adv * 25.0)
