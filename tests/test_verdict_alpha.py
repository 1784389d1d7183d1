"""The verdict tests the alpha over buy-and-hold (excess adjusted for beta) and states the minimum
detectable edge of its window: known answers in a falling and in a rising market, the figure itself,
and a gate's window that never reads "out of sample"."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from backtests import oos_test as sig
from backtests.metrics_model import MetricsDocument
from backtests.verdict import judge, minimum_detectable_edge


def _document(returns, bench, **top):
    oos = sig.out_of_sample_test(
        returns, {"buy_and_hold": bench}, strategy="champion", benchmark="buy_and_hold"
    )
    oos["held_out"] = True
    doc = {"window": "test", "benchmark": "buy_and_hold", "significance_level": 0.05, "oos_test": oos, **top}
    return MetricsDocument.parse({**doc, "strategies": {"champion": {}}})


def test_a_long_only_champion_beating_buy_and_hold_in_a_falling_market_is_significant():
    rng = np.random.default_rng(0)
    n = 126
    bench = rng.normal(-0.006, 0.012, n)  # the market falls 0.6% a day
    champion = 0.5 * bench + 0.002 + rng.normal(0.0, 0.002, n)  # half invested, +0.2%/day of alpha
    doc = _document(champion, bench)
    oos, excess = doc.oos_test, doc.oos_test.excess["buy_and_hold"]
    assert oos.sharpe_per_day < 0 and oos.psr_after_looks < 0.5  # it lost money: the old rule said no
    assert excess.beta == pytest.approx(0.5, abs=0.05) and excess.alpha_per_day == pytest.approx(
        0.002, abs=5e-4
    )
    verdict = judge(doc)
    assert verdict.outcome == "significant", verdict.text
    assert verdict.text.startswith("edge significant out of sample: alpha over buy_and_hold +0.")


def test_a_levered_champion_in_a_rising_market_without_alpha_is_not_significant():
    rng = np.random.default_rng(1)
    n = 126
    bench = rng.normal(0.004, 0.01, n)
    champion = 2.3 * bench + rng.normal(0.0, 0.01, n)  # beta 2.3, no alpha
    doc = _document(champion, bench)
    excess = doc.oos_test.excess["buy_and_hold"]
    assert excess.p_value < 0.05  # its mean beats buy-and-hold's ...
    assert judge(doc).outcome == "not significant"  # ... by leverage, not by an edge


def test_the_verdict_states_the_minimum_detectable_edge_of_its_window():
    rng = np.random.default_rng(2)
    n = 48
    bench = rng.normal(0.0, 0.01, n)
    doc = _document(bench + rng.normal(0.0, 0.01, n), bench)
    excess = doc.oos_test.excess["buy_and_hold"]
    expected = (NormalDist().inv_cdf(0.95) + NormalDist().inv_cdf(0.8)) * excess.alpha_standard_error
    assert minimum_detectable_edge(excess.alpha_standard_error, 0.05) == pytest.approx(expected)
    ir = expected / excess.residual_volatility * math.sqrt(252)
    verdict = judge(doc)
    assert verdict.outcome == "not significant"
    assert f"could have seen {100 * expected:.2f}%/day (IR {ir:.1f}) at 80% power" in verdict.text
    # More looks: a smaller per-look level, a larger edge needed.
    assert minimum_detectable_edge(1.0, 0.05, looks=10) > minimum_detectable_edge(1.0, 0.05)


def test_a_window_a_gate_decided_on_never_reads_out_of_sample():
    rng = np.random.default_rng(3)
    bench = rng.normal(0.0, 0.01, 63)
    doc = _document(bench + 0.01 + rng.normal(0.0, 0.005, 63), bench, role="selection")
    verdict = judge(doc)
    assert verdict.outcome == "significant"
    assert verdict.headline == "edge significant on the selection window"


def test_a_return_whose_sign_changes_at_nearby_account_sizes_is_not_significant():
    rng = np.random.default_rng(4)
    bench = rng.normal(0.0, 0.01, 63)
    returns = bench + 0.01 + rng.normal(0.0, 0.005, 63)
    oos = sig.out_of_sample_test(
        returns, {"buy_and_hold": bench}, strategy="champion", benchmark="buy_and_hold"
    )
    oos["held_out"] = True

    def doc(curve):
        raw = {
            "window": "test",
            "benchmark": "buy_and_hold",
            "significance_level": 0.05,
            "initial_value": 1e6,
            "oos_test": oos,
            "strategies": {"champion": {"cum_returns_final": 0.399}},
            "capacity": [{"capital": c, "cum_returns_final": r} for c, r in curve],
        }
        return MetricsDocument.parse(raw)

    steady = judge(doc([(1e4, 0.35), (1e5, 0.38), (1e6, 0.399), (1e7, 0.30), (1e8, -0.2)]))
    assert steady.outcome == "significant"  # $100M is not nearby: capacity, not one path
    flipped = judge(doc([(1e4, -0.057), (1e5, -0.02), (1e6, 0.399), (1e7, -0.276), (1e8, -0.5)]))
    assert flipped.outcome == "not significant"
    assert "changes sign at nearby account sizes ($100,000: -2.0%, $10,000,000: -27.6%)" in flipped.text


def test_an_account_that_held_the_benchmark_throughout_is_not_significant():
    # Its excess is zero on every session: nothing to test, and the answer is "no edge", not
    # "cannot tell". A window too short to measure stays "not measurable".
    bench = np.random.default_rng(5).normal(0.001, 0.01, 63)
    verdict = judge(_document(bench.copy(), bench))
    assert verdict.outcome == "not significant" and verdict.significant is False
    assert "no excess over buy_and_hold" in verdict.text
    assert judge(_document(bench[:20].copy(), bench[:20])).outcome == "not measurable"
