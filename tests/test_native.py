"""envs.kernels.native: the hand-written C step kernel equals the eager step up to float rounding, in every
action and reward mode; it raises on bad actions and bars; it is only taken where it applies; and a
missing or failing compiler falls back to torch with a warning.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from data.errors import DataError
from data.toy import crashed, toy_market, with_gaps
from envs import trading
from envs.core import StepCore
from envs.execution import FRICTIONLESS
from envs.fast_step import step_kernel
from envs.kernels import native
from envs.reference import ReferenceEnv
from envs.trading import ActionError, EnvParams

# Only a machine without a C compiler skips these: with one, a kernel that fails to build fails them.
# (The fallback tests below run everywhere.)
needs_kernel = pytest.mark.skipif(
    native.compiler() is None, reason="no C compiler installed (optional: it builds the native kernel)"
)


TOY_MARKET = {"num_steps": 900, "num_assets": 5, "num_features": 3, "seed": 1}  # the `market` fixture


@pytest.fixture(scope="module")
def crash_market():
    """Prices down 99% from bar 400 on: a fully invested book goes bust (terminated)."""
    return crashed(toy_market(2 * 390, 5, 3, seed=2), 400)


def _actions(params: EnvParams, num_envs: int, num_assets: int, gen: torch.Generator) -> torch.Tensor:
    if params.action_mode == "shares":
        return torch.rand(num_envs, num_assets, generator=gen) * 2.4 - 1.2  # some beyond [-1, 1]
    # Mostly partial books, some rows over-allocated (scaled to 1) and some negative entries.
    return torch.rand(num_envs, num_assets, generator=gen) * 0.5 - 0.05


def _assert_steps_match(
    market, params: EnvParams, steps: int = 14, num_envs: int = 24, dollars: float = 1e-2
) -> dict[str, int]:
    """Steps eager and native side by side from the same states; ``dollars``: the absolute tolerance
    on dollar amounts (float32 holdings round by an ulp of the share count times the price; the
    execution model prices each asset's fill in float32 too, so cash left after scaled buys, a
    difference of ~$1M sums, is a few cents apart: at least 0.1 then)."""
    if params.execution:
        dollars = max(dollars, 0.1)
    state, _ = trading.reset(market, params, num_envs, torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    seen = {"done": 0, "terminated": 0}
    for _ in range(steps):
        action = _actions(params, num_envs, market.num_assets, gen)
        assert step_kernel(market, params, state, True) == "native"
        s1, o1, r1, te1, tr1, i1 = trading.step(market, params, state, action)
        s2, o2, r2, te2, tr2, i2 = trading.step(market, params, state, action, fast=True)
        for name in ("t", "step_count", "rng"):
            assert torch.equal(getattr(s1, name), getattr(s2, name)), name
        assert torch.equal(te1, te2) and torch.equal(tr1, tr2)
        assert torch.equal(i1["t"], i2["t"]) and torch.equal(i1["bar_t"], i2["bar_t"])
        for a, b in [(s1.cash, s2.cash), (s1.value, s2.value), (s1.peak, s2.peak), (i1["cost"], i2["cost"])]:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=dollars)  # float32 per-asset rounding
        torch.testing.assert_close(i1["traded_notional"], i2["traded_notional"], rtol=1e-5, atol=dollars)
        torch.testing.assert_close(s1.shares, s2.shares, rtol=1e-5, atol=1e-3)
        # A trade is a difference of holdings (target - held): its rounding is the holdings' size.
        scale = float(torch.maximum(s1.shares.abs(), state.shares.abs()).max())
        torch.testing.assert_close(
            i1["shares_traded"], i2["shares_traded"], rtol=1e-5, atol=1e-3 + 1e-6 * scale
        )
        torch.testing.assert_close(s1.sharpe_a, s2.sharpe_a, rtol=1e-4, atol=1e-9)
        torch.testing.assert_close(s1.sharpe_b, s2.sharpe_b, rtol=1e-4, atol=1e-12)
        torch.testing.assert_close(o1, o2, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(i1["final_obs"], i2["final_obs"], rtol=1e-5, atol=1e-6)
        # The differential Sharpe ratio divides by the return's small EMA variance: it amplifies the
        # cents of float32 rounding in cash, the more so the smaller the per-step cost.
        dsr = params.reward == "diff_sharpe"
        torch.testing.assert_close(r1, r2, rtol=1e-2 if dsr else 1e-3, atol=1e-3 if dsr else 1e-5)
        seen["done"] += int((te1 | tr1).sum())
        seen["terminated"] += int(te1.sum())
        state = s1  # both continue from the same state
    return seen


# The execution model off (the frictionless fill), the defaults (None), and every term binding.
OFF = FRICTIONLESS
BINDING = {"spread_bps": 4.0, "max_participation": 6e-4, "impact_coef": 30.0, "min_order_notional": 4000.0}


@needs_kernel
@pytest.mark.parametrize("action_mode", ["weights", "shares"])
@pytest.mark.parametrize("reward", ["log_return", "return", "diff_sharpe"])
@pytest.mark.parametrize("execution", [OFF, {}, BINDING], ids=["off", "defaults", "binding"])
def test_native_step_matches_eager(market, action_mode, reward, execution):
    # Autoresets (episode_len 6), costs, slippage and a drawdown penalty on; a scaled reward.
    params = EnvParams(
        **execution,
        decision_interval=3,
        episode_len=6,
        action_mode=action_mode,
        reward=reward,
        drawdown_penalty=0.1,
        reward_scale=3.0,
        max_shares=5000.0,  # "shares" buys then often exceed the cash: the scaled, floored path
    )
    seen = _assert_steps_match(market, params)
    assert seen["done"] > 0


@needs_kernel
@pytest.mark.parametrize("action_mode", ["weights", "shares"])
def test_native_risk_limits_match_eager(market, action_mode):
    # A binding weight cap (the excess stays in cash) and a turnover penalty, in both action modes.
    params = EnvParams(
        decision_interval=3,
        episode_len=6,
        action_mode=action_mode,
        max_weight=0.15,
        turnover_penalty=0.3,
        max_shares=5000.0,
    )
    seen = _assert_steps_match(market, params)
    assert seen["done"] > 0


@needs_kernel
@pytest.mark.parametrize("action_mode", ["weights", "shares"])
@pytest.mark.parametrize("execution", [OFF, BINDING], ids=["off", "binding"])
def test_native_untradable_bars_match_eager(market, action_mode, execution):
    # Forward-filled bars (orders skipped), a late joiner, a leaver (sold when it goes for good).
    gappy = with_gaps(market, 0.3, seed=5)
    params = EnvParams(
        **execution, decision_interval=3, episode_len=500, action_mode=action_mode, max_shares=5000.0
    )
    # Cash left after scaled buys is a difference of ~$1M sums: float32 holdings (an ulp of ~3000
    # shares is $0.02 at $100) put it a few cents apart, as in the termination test below.
    _assert_steps_match(gappy, params, steps=60, dollars=0.5)


@needs_kernel
def test_native_step_terminations_match_eager(crash_market):
    params = EnvParams(decision_interval=5, episode_len=200)
    # After the crash a book holds ~1e6 shares of a ~$1 asset: one float32 ulp of it is $0.06.
    seen = _assert_steps_match(crash_market, params, steps=30, dollars=0.5)
    assert seen["terminated"] > 0


@needs_kernel
@pytest.mark.parametrize("execution", [OFF, {}, BINDING], ids=["off", "defaults", "binding"])
def test_native_step_matches_reference_env(market, execution):
    """The documented semantics (the plain-Python reference env), env by env, to 1e-4 relative."""
    # reward_scale 1: the reward tolerance below is for an unscaled reward (float32 error x 100 exceeds it).
    params = EnvParams(**execution, decision_interval=3, episode_len=500, reward_scale=1.0)
    num_envs = 4
    state, _ = trading.reset(market, params, num_envs, torch.Generator().manual_seed(3))
    refs = [ReferenceEnv(market, params, int(state.t[i]), int(state.rng[i])) for i in range(num_envs)]
    gen = torch.Generator().manual_seed(4)
    for _ in range(40):
        action = _actions(params, num_envs, market.num_assets, gen)
        state, _, reward, *_ = trading.step(market, params, state, action, fast=True)
        for i, ref in enumerate(refs):
            r = ref.step(action[i].tolist())
            assert state.cash[i].item() == pytest.approx(ref.cash, rel=1e-4, abs=1.0)
            assert state.value[i].item() == pytest.approx(ref.value, rel=1e-4, abs=1.0)
            assert state.shares[i].tolist() == pytest.approx(ref.shares, rel=1e-4, abs=1e-4)
            assert reward[i].item() == pytest.approx(r[1], rel=1e-4, abs=1e-7)


@needs_kernel
def test_nan_action_raises_before_anything_changes(market):
    params = EnvParams(decision_interval=3)
    state, obs = trading.reset(market, params, 8, torch.Generator().manual_seed(0))
    assert step_kernel(market, params, state, True) == "native"
    before = {f.name: getattr(state, f.name).clone() for f in dataclasses.fields(state)}
    for bad in (float("nan"), float("inf")):
        action = torch.full((8, market.num_assets), 0.1)
        action[5, 2] = bad
        with pytest.raises(ActionError, match="NaN or inf"):
            trading.step(market, params, state, action, fast=True)
    with pytest.raises(ActionError, match="shape"):
        trading.step(market, params, state, torch.zeros(8, market.num_assets + 1), fast=True)
    # A float64 entry beyond float32's range is inf in a float32 step: an error on both paths.
    huge = torch.full((8, market.num_assets), 0.1, dtype=torch.float64)
    huge[1, 1] = 1e39
    for fast in (True, False):
        with pytest.raises(ActionError, match="NaN or inf"):
            trading.step(market, params, state, huge, fast=fast)
    for name, value in before.items():
        assert torch.equal(getattr(state, name), value)


@needs_kernel
def test_decision_bar_outside_the_market_raises(market):
    params = EnvParams(decision_interval=3)
    state, _ = trading.reset(market, params, 4, torch.Generator().manual_seed(0))
    for t in (-1, market.num_steps - 3, 2**63 - 1):  # (the last would overflow t + k)
        bad = dataclasses.replace(state, t=torch.tensor([0, t, 2, 3]))
        with pytest.raises(DataError, match="decision bars outside"):
            trading.step(market, params, bad, torch.zeros(4, market.num_assets), fast=True)


@needs_kernel
def test_only_supported_configurations_run_natively(market, monkeypatch):
    gen = torch.Generator().manual_seed(0)
    plain = EnvParams(decision_interval=3)
    state, _ = trading.reset(market, plain, 4, gen)
    assert step_kernel(market, plain, state, True) == "native"
    assert step_kernel(market, plain, state, False) == "eager"
    # Per-asset trade info and float64 positions go through torch (compiled or eager).
    for params in (
        EnvParams(decision_interval=3, trade_info=True),
        EnvParams(decision_interval=3, precision="float64"),
    ):
        st, _ = trading.reset(market, params, 4, gen)
        assert step_kernel(market, params, st, True) != "native"
    # A state with other dtypes or layouts than the env's own goes through torch too.
    odd = dataclasses.replace(state, shares=state.shares.t().contiguous().t())
    assert not odd.shares.is_contiguous() or market.num_assets == 1
    assert step_kernel(market, plain, odd, True) != "native"
    # Nothing unsupported reaches the kernel: not these, nor states shaped unlike the market's.
    monkeypatch.setattr(native, "_state", {"lib": _forbidden})
    info = EnvParams(decision_interval=3, trade_info=True)
    st, _ = trading.reset(market, info, 4, gen)
    trading.step(market, info, st, torch.zeros(4, market.num_assets), fast=True)
    wide = dataclasses.replace(state, shares=torch.zeros(4, market.num_assets + 3))
    short = dataclasses.replace(state, cash=state.cash[:1].clone())
    assert step_kernel(market, plain, wide, True) != "native"
    assert step_kernel(market, plain, short, True) != "native"
    with pytest.raises(ValueError, match="shape"):  # the env's own error, not a crash in C
        trading.step(market, plain, wide, torch.zeros(4, market.num_assets), fast=True)


def _forbidden(*args):
    raise AssertionError("the native kernel was called")


def test_failing_compiler_falls_back_with_one_warning(market, monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "false")  # exists, fails every build
    params = EnvParams(decision_interval=3, episode_len=4)
    state, _ = trading.reset(market, params, 6, torch.Generator().manual_seed(0))
    action = torch.full((6, market.num_assets), 0.1)
    with caplog.at_level(logging.WARNING, logger="envs.kernels.native"):
        assert native.library() is None
        assert native.library() is None
    assert "false failed" in native.why_unavailable()
    assert sum("native env step unavailable" in r.message for r in caplog.records) == 1
    assert not list((tmp_path / "cache").glob("*.so"))  # no half-built library left behind
    assert step_kernel(market, params, state, True) != "native"
    eager = trading.step(market, params, state, action)
    fallback = trading.step(market, params, state, action, fast=True)
    torch.testing.assert_close(eager[0].value, fallback[0].value, rtol=1e-5, atol=1e-2)


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv(native.DISABLE_ENV, "0")
    assert native.library() is None
    assert native.DISABLE_ENV in native.why_unavailable()


@needs_kernel
def test_build_is_cached_per_source(monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv(native.CACHE_ENV, str(cache))
    assert native.library() is not None
    built = sorted(cache.glob("step-*.so"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    monkeypatch.setattr(native, "_state", {})
    assert native.library() is not None  # loaded from the cache, not rebuilt
    assert sorted(cache.glob("step-*.so")) == built and built[0].stat().st_mtime_ns == stamp
    # A damaged library in a cache is rebuilt, not fatal (another folder: a path this process has
    # loaded before would be served by the dynamic loader without reading the file).
    other = tmp_path / "other"
    other.mkdir()
    (other / built[0].name).write_bytes(b"not a shared library")
    monkeypatch.setenv(native.CACHE_ENV, str(other))
    monkeypatch.setattr(native, "_state", {})
    assert native.library() is not None and (other / built[0].name).stat().st_size > 1000
    monkeypatch.setenv(native.CACHE_ENV, str(cache))
    # Another source is another library.
    source = tmp_path / "step.c"
    source.write_text(native.SOURCE.read_text() + "\n/* changed */\n")
    monkeypatch.setattr(native, "SOURCE", source)
    monkeypatch.setattr(native, "_state", {})
    assert native.library() is not None
    assert len(list(cache.glob("step-*.so"))) == 2
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


def test_step_cores_lead_with_the_state_fields_in_order():
    # envs.trading builds the next EnvState from the first ten fields of either core, by position.
    state_fields = tuple(f.name for f in dataclasses.fields(trading.EnvState))
    assert StepCore._fields[:10] == native.NativeStep._fields[:10] == state_fields
