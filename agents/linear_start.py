"""The direct learner's warm start: a fresh policy that begins as the linear baseline's scores.

A per-asset network started from small random weights holds nearly equal weights, and a softmax over
40 names that the gradient must first learn to concentrate spends its budget getting to what a ridge
regression finds in closed form. So a fresh direct policy (``DirectArgs.linear_start``) starts from
the linear baseline (``backtests.linear``) fitted on the **train window only**:

- **fit**: ridge of each asset's return over the next ``DirectArgs.start_horizon`` decisions (fill
  bar's open to the close ``start_horizon`` decisions on, demeaned across assets; 1: the next
  interval, the linear baseline's target; a session's decisions: the next session, where a daily edge
  pays) on its features (demeaned the same way), on the train window's decisions before the
  learner's held-out tail (those whose target reaches into it left out); the penalty is the one of ``backtests.linear.PENALTIES`` with the best
  mean information coefficient on that held-out tail; none positive: the zero model (no asset
  preferred: the policy starts at equal weights, as the linear baseline's zero model holds). The
  tournament's validation window is never read.
- **blend** (``DirectArgs.start_blend``, on by default): at the chosen penalty the ridge's scores
  are averaged, at equal spread over the fit rows, with those of the one feature that best ranks the
  fit rows' returns (the largest ``|t|`` of its per-row cross-sectional correlation with them; its
  sign from a one-feature regression): a sparse model beside the dense one. With a few dozen
  sessions and a few dozen features the ridge spreads weight over features that only fit noise;
  where one feature carries the edge the single-feature model ranks the test window better, where
  several do the ridge does, and their average (the single feature scaled to the ridge's spread, so
  the blend keeps its units) kept most of either's gain on planted markets (docs/benchmarks.md,
  "The start's blend"). The single feature is picked by a bagged screen
  (``DirectArgs.start_screen_draws``, 64 by default): the screen run on resamples of the fit rows,
  each feature it picks weighted by its share of the draws, since which of several near-copies of
  one factor reads the best ``|t|`` on a few dozen sessions is noise (docs/benchmarks.md, "The
  start's screen"). The penalty and the zero model stay the ridge's, chosen as above; the blend
  is made at that penalty (choosing the penalty by the blend's own held-out information coefficient
  fell to the zero model more often and lost on the daily shape).
- **the policy**: the network's linear skip (``NetworkConfig.linear_skip``, ``l_a += s . x_a`` on the
  normalized inputs) is set to the ridge coefficients times a temperature, the network's own asset
  read-out and cash logit start at zero (so the first policy is the ridge's softmax); the cash logit's
  bias sits at the scores' average level, so the book starts nearly fully invested.
- **temperature**: the one whose softmax puts ``top_mass`` of the book, on average over the train
  window's decisions, on the top ``backtests.linear.TOP_FRACTION`` of the tradable assets, where the
  linear baseline holds all of its book (a plain softmax of raw scores over 40 names barely
  concentrates).
- **observation statistics**: fitted once on the train window's fit rows with the book the ridge's
  top quantile would hold, then frozen, so the skip's coefficients read the inputs they were set on.

The direct gradient then fine-tunes the whole network from there, and the learner's held-out early
stopping keeps the warm start itself when no fine-tuned step scores better on the held-out tail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from agents.policy import Policy
from backtests.linear import (
    PENALTIES,
    TOP_FRACTION,
    DecisionRows,
    demean,
    information_coefficient,
    ridge_path,
)


class DecisionBars(Protocol):
    """What the warm start reads of ``agents.direct.Decisions`` (rows = decision bars)."""

    features: Tensor  # (K, A, F)
    time_of_day: Tensor  # (K,) at the decision bar
    tradable: Tensor  # (K, A) at the decision bar
    fill_ok: Tensor  # (K, A) at the fill bar
    hold: Tensor  # (K, A) fill bar's open to the mark's close


@dataclass(frozen=True)
class LinearStart:
    """A ridge fit on the train window's fit rows: ``coef (F,)`` over the raw features, its penalty
    multiple, the held-out tail's mean information coefficient and the softmax temperature."""

    coef: Tensor
    penalty: float
    holdout_ic: float
    temperature: float
    blend: bool = False
    """``coef`` is the ridge blended with the best single feature (:func:`start_path`)"""
    screen_draws: int = 0
    """the blend's screen: bootstrap draws of :func:`screen_weights` (0: the plain screen)"""
    single_share: float = 0.5
    """the blend's weight on the screened feature's model (:func:`start_path`; 0.5: half each)"""

    @property
    def is_zero(self) -> bool:
        """The zero model: no asset preferred (equal weights)."""
        return not bool(self.coef.any())

    def scores(self, features: Tensor) -> Tensor:
        """Scores ``(..., A)`` of features ``(..., A, F)`` (float32)."""
        return features @ self.coef.to(features.device, torch.float32)


def forward_returns(d: DecisionBars, horizon: int) -> Tensor:
    """``(K - horizon + 1, A)`` float64: row ``k``'s return from its fill bar's open to the close of
    decision bar ``k + horizon`` (``horizon = 1``: ``hold``), compounded from the rows' ``hold`` and
    the ``gap`` between them (a decision bar's close to its fill bar's open)."""
    hold = torch.log1p(d.hold.to(torch.float64))
    if horizon == 1:
        return d.hold.to(torch.float64)
    # g[k] = hold of row k, then the gap of row k + 1: row k's growth up to row k + 1's fill.
    g = hold[:-1] + torch.log1p(d.gap[1:].to(torch.float64))
    c = torch.cat([g.new_zeros(1, g.shape[1]), g.cumsum(dim=0)])
    k = hold.shape[0] - horizon + 1
    return torch.expm1(c[horizon - 1 : horizon - 1 + k] - c[:k] + hold[horizon - 1 :])


def _panel(d: DecisionBars, rows: slice | Tensor, y: Tensor) -> DecisionRows:
    return DecisionRows(
        x=d.features[rows].to(torch.float64),
        y=y[rows],
        ok=d.tradable[rows] & d.fill_ok[rows],
    )


def trade_rows(time_of_day: Tensor, window: float) -> Tensor:
    """``(K,)`` bool: the decisions a policy of trade window ``window`` trades at (``agents.policy``:
    time of day at most the window; all of them at 1.0)."""
    return time_of_day <= window if window < 1.0 else torch.ones_like(time_of_day, dtype=torch.bool)


def returns_to_next_trade(d: DecisionBars, trade: Tensor) -> tuple[Tensor, Tensor]:
    """``(rows (M,), y (M, A) float64)``: each trade row that has a next one, and its return from its
    fill bar's open to the close of the next trade row's decision bar (what a book bought at the row's
    fill and held to the next trade earns; :func:`forward_returns` with a horizon per row)."""
    index = torch.nonzero(trade).squeeze(-1)
    rows, following = index[:-1], index[1:]
    hold = torch.log1p(d.hold.to(torch.float64))
    g = hold[:-1] + torch.log1p(d.gap[1:].to(torch.float64))
    c = torch.cat([g.new_zeros(1, g.shape[1]), g.cumsum(dim=0)])
    return rows, torch.expm1(c[following - 1] - c[rows] + hold[following - 1])


def start_panels(
    d: DecisionBars, fit_rows: int, horizon: int = 1, window: float = 1.0
) -> tuple[DecisionRows, DecisionRows, Tensor]:
    """The start's fit and held-out rows, and the rows before ``fit_rows`` it trades at (whose scores
    set its temperature): with ``window`` 1.0 every row, its target the return over the next
    ``horizon`` decisions; with a trade window the rows the policy trades at, each target the return
    held to the next trade. A fit row's target never reaches past ``fit_rows`` (no fit row reads a
    held-out return)."""
    if window >= 1.0:
        y = forward_returns(d, horizon)
        end = max(0, fit_rows - horizon + 1)
        every = torch.arange(fit_rows, device=y.device)  # (the temperature reads every fit row)
        return _panel(d, slice(0, end), y), _panel(d, slice(fit_rows, max(fit_rows, y.shape[0])), y), every
    trade = trade_rows(d.time_of_day, window)
    rows, y = returns_to_next_trade(d, trade)
    following = torch.nonzero(trade).squeeze(-1)[1:]  # each row's next trade
    fit, tail = following <= fit_rows, rows >= fit_rows
    panel = lambda keep: DecisionRows(  # noqa: E731
        x=d.features[rows[keep]].to(torch.float64),
        y=y[keep],
        ok=d.tradable[rows[keep]] & d.fill_ok[rows[keep]],
    )
    return panel(fit), panel(tail), rows[fit]


#: The generator seed of the screen's bootstrap draws (:func:`screen_weights`): fixed, so a start
#: depends on its rows only, as the ridge does (every fresh pod of a market shares it).
SCREEN_SEED = 0


def _row_correlations(panel: DecisionRows) -> Tensor:
    """``(K', F)``: each feature's cross-sectional correlation with the target in each row that has
    at least three valid names (as ``information_coefficient`` counts rows: two names correlate at
    +-1 whatever they hold); a feature without spread in a row counts 0 there."""
    use = panel.ok.sum(dim=1) >= 3
    ok = panel.ok[use]
    x, y = demean(panel.x[use], ok), demean(panel.y[use], ok)
    num = (x * y.unsqueeze(-1)).sum(dim=1)
    den = (x.square().sum(dim=1) * y.square().sum(dim=1).unsqueeze(-1)).sqrt()
    return torch.where(den > 0, num / den.clamp(min=1e-300), torch.zeros_like(num))


def _best_by_t(corr: Tensor) -> int:
    """The column of ``corr (K, F)`` whose mean is largest in units of its standard error."""
    if corr.shape[0] < 2:
        return int(corr.mean(dim=0).abs().argmax()) if corr.shape[0] else 0
    se = corr.std(dim=0) / math.sqrt(corr.shape[0])
    t = torch.where(se > 0, corr.mean(dim=0) / se.clamp(min=1e-300), torch.zeros_like(se))
    return int(t.abs().argmax())


def screened_feature(panel: DecisionRows) -> int:
    """The feature whose per-row cross-sectional correlation with the target has the largest mean in
    units of its standard error over the rows (``|t|``): the one that best ranks the panel's returns.
    Rows with fewer than three valid names are left out; with fewer than two rows left, the largest
    mean correlation decides (feature 0 with none)."""
    return _best_by_t(_row_correlations(panel))


def screen_weights(panel: DecisionRows, draws: int, seed: int = SCREEN_SEED) -> Tensor:
    """``(F,)`` float64 summing to 1: with ``draws`` > 0 the share of ``draws`` bootstrap resamples
    of the panel's rows (with replacement, seeded by ``seed``) in which each feature is
    the screened one (:func:`screened_feature` of the resample); with 0, or fewer than two rows, 1
    on the screened feature of the panel itself.

    Why bagged: the screen picks one column among near-copies of a factor (a five-session return
    raw, ranked, relative to the market or in risk units) and slow columns whose correlation
    persists through a session, and which one reads the largest ``|t|`` on a few dozen sessions is
    noisy; averaging the picks over resamples (Breiman's bagging of an unstable selection) spreads
    the weight over the columns the data cannot tell apart (docs/benchmarks.md, "The start's
    screen")."""
    corr = _row_correlations(panel)
    weights = torch.zeros(panel.x.shape[-1], dtype=torch.float64, device=panel.x.device)
    rows = corr.shape[0]
    if draws <= 0 or rows < 2:
        weights[_best_by_t(corr)] = 1.0
        return weights
    gen = torch.Generator().manual_seed(seed)
    for _ in range(draws):  # (one resample at a time: a (draws, K, F) gather grows with the window)
        index = torch.randint(0, rows, (rows,), generator=gen).to(corr.device)
        weights[_best_by_t(corr[index])] += 1.0
    return weights / draws


def _spread(panel: DecisionRows, coef: Tensor) -> float:
    """The standard deviation of ``coef``'s scores across the valid names of the panel's rows."""
    s = demean(panel.x @ coef, panel.ok)
    return float((s.square().sum() / panel.ok.sum().clamp(min=1)).sqrt())


def _single(panel: DecisionRows, j: int, penalty: float, like: Tensor) -> Tensor:
    """Feature ``j``'s own one-feature ridge, as an ``(F,)`` coefficient vector."""
    single = torch.zeros_like(like)
    one = DecisionRows(x=panel.x[..., j : j + 1], y=panel.y, ok=panel.ok)
    single[j] = ridge_path(one, (penalty,))[0][0]
    return single


def start_path(
    panel: DecisionRows,
    penalties: tuple[float, ...],
    blend: bool,
    screen_draws: int = 0,
    single_share: float = 0.5,
) -> list[Tensor]:
    """The start's coefficients ``(F,)`` (float64) of ``panel`` at each penalty multiple: the ridge
    (``backtests.linear.ridge_path``), or with ``blend`` the average of the ridge's scores and the
    screened feature's (:func:`screened_feature`, its own one-feature regression) scaled to the
    ridge's spread over the panel: an equal-weight blend that keeps the ridge's units (the nonlinear
    start fits what it leaves, in return units). With ``screen_draws`` > 0 the single feature is the
    bagged screen's (:func:`screen_weights`): the features it picks, each its own regression at unit
    spread, weighted by their shares of the draws. ``single_share`` weighs the two sides: the ridge
    times ``1 - single_share`` plus the single-feature model times ``single_share`` (one half: the
    equal blend; 1: the single-feature model alone, at the ridge's spread). A ridge without spread
    stays as it is."""
    ridges = ridge_path(panel, penalties)
    if not blend:
        return ridges
    weights = screen_weights(panel, screen_draws)
    picked = torch.nonzero(weights).squeeze(-1).tolist()
    if len(picked) == 1:  # (one pick: its regression as it is; the spread scaling below sets its size)
        single = _single(panel, picked[0], penalties[0], ridges[0])
    else:
        single = torch.zeros_like(ridges[0])
        for j in picked:
            one = _single(panel, j, penalties[0], ridges[0])
            spread = _spread(panel, one)
            if spread > 0:
                single += float(weights[j]) * one / spread
    single_spread = _spread(panel, single)
    out = []
    for coef in ridges:
        spread = _spread(panel, coef)
        if not (spread > 0 and single_spread > 0):
            out.append(coef)
            continue
        scaled = single * (spread / single_spread)
        # (one half as the equal blend has always been computed, so a default start is the same to the bit)
        if single_share == 0.5:
            out.append(0.5 * (coef + scaled))
        else:
            out.append((1.0 - single_share) * coef + single_share * scaled)
    return out


def top_mass(logits: Tensor, tradable: Tensor, fraction: float = TOP_FRACTION) -> Tensor:
    """Mean share of a softmax over ``logits (K, A)`` (untradable assets left out) that sits on the
    top ``fraction`` of the tradable assets of each row."""
    take = max(1, round(fraction * logits.shape[-1]))
    masked = torch.where(tradable, logits, torch.full_like(logits, -torch.inf))
    probs = torch.softmax(masked, dim=-1)
    return probs.topk(take, dim=-1).values.sum(dim=-1).mean()


def temperature_for(scores: Tensor, tradable: Tensor, mass: float) -> float:
    """The factor ``c`` whose ``softmax(c * scores)`` puts ``mass`` on the top quantile on average
    (bisection on ``log c``: the mass grows with ``c``)."""
    spread = float(scores[tradable].std()) if bool(tradable.any()) else 0.0
    if not spread > 0.0:
        return 0.0
    lo, hi = math.log(1e-3 / spread), math.log(1e3 / spread)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if float(top_mass(math.exp(mid) * scores, tradable)) < mass:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


def fit_linear_start(
    d: DecisionBars,
    fit_rows: int,
    mass: float,
    horizon: int = 1,
    window: float = 1.0,
    blend: bool = False,
    screen_draws: int = 0,
    single_share: float = 0.5,
) -> LinearStart:
    """The ridge of the rows ``[0, fit_rows)`` with its penalty chosen on ``[fit_rows, K)``, its target
    the return over the next ``horizon`` decisions (:func:`forward_returns`; the rows whose target
    reaches past their block's end left out, so no fit row reads a held-out return); with a trade
    ``window`` < 1 the rows the policy trades at, each target the return held to its next trade
    (:func:`start_panels`); the zero model when no penalty has a positive held-out information
    coefficient; with ``blend`` the ridge at the chosen penalty blended with the screened feature
    (:func:`start_path`, its screen bagged over ``screen_draws`` resamples of the fit rows, the
    single-feature side weighted ``single_share``; its held-out information coefficient recorded)."""
    fit, tail, fit_index = start_panels(d, fit_rows, horizon, window)
    zero = LinearStart(
        coef=torch.zeros(d.features.shape[-1], device=d.features.device),
        penalty=math.inf,
        holdout_ic=0.0,
        temperature=0.0,
    )
    if int(fit.ok.sum()) <= fit.x.shape[-1] or int(tail.ok.sum()) == 0:
        return zero
    best: tuple[float, float, Tensor] | None = None
    for penalty, coef in zip(PENALTIES, ridge_path(fit, PENALTIES), strict=True):
        ic = information_coefficient(tail.x @ coef, tail)
        if ic == ic and ic > 0.0 and (best is None or ic > best[0]):
            best = (ic, float(penalty), coef)
    if best is None:
        return zero
    ic, penalty, coef = best
    if blend:  # (at the ridge's penalty: the ridge decides the penalty and the zero model)
        coef = start_path(fit, (penalty,), True, screen_draws, single_share)[0]
        ic = information_coefficient(tail.x @ coef, tail)
    scores = d.features[fit_index] @ coef.to(torch.float32)
    temperature = temperature_for(scores, d.tradable[fit_index], mass)
    if temperature <= 0.0:
        return zero
    return LinearStart(
        coef=coef.to(torch.float32),
        penalty=penalty,
        holdout_ic=ic,
        temperature=temperature,
        blend=blend,
        screen_draws=screen_draws if blend else 0,
        single_share=single_share if blend else 0.5,
    )


@torch.no_grad()
def apply_linear_start(policy: Policy, start: LinearStart, d: DecisionBars, fit_rows: int) -> None:
    """Set ``policy``'s skip, read-out and cash logit to ``start`` (its observation statistics must
    be fitted already: the skip reads normalized inputs)."""
    net, norm = policy.net, policy.obs_norm
    # score = coef . x = coef . (mean + sd * z): on the normalized features the weights are coef * sd,
    # and coef . mean is the same for every asset (moved into the cash logit's bias below).
    sd = torch.sqrt(norm.var_asset[2:] + norm.eps)
    coef = start.coef.to(sd.device)
    weight = torch.zeros_like(net.asset_skip.weight)
    weight[0, 2:] = start.temperature * coef * sd
    net.asset_skip.weight.copy_(weight)
    for layer in (net.actor_readout, net.actor_cash):
        layer.weight.zero_()
        layer.bias.zero_()
    level = start.scores(d.features[:fit_rows]).mean() - (coef * norm.mean_asset[2:]).sum()
    net.actor_cash.bias.fill_(float(start.temperature * level))
