"""The direct learner's nonlinear start: the ridge start plus a small network of each asset's features.

A linear score of the features cannot use an edge that lives in their interaction (the planted
``nonlinear`` shape: the sign of one move depends on another, ``data.planted``), and the direct
gradient, started from the ridge, mostly moves the network's linear parts. So with
``DirectArgs.nonlinear_start`` a fresh policy's per-asset encoder (``asset_layers = 1``: ``h_a =
relu(W z_a + b)`` on the normalized inputs ``z_a``) is fitted, before any gradient step, as a
regression on the same rows and target as the ridge start (``agents.linear_start.start_panels``):

- **members**: the encoder's ``embed`` units hold ``embed // 16`` networks of 16 units, each fitted
  from its own seed as below, the score their mean (``v`` divided by their number): an ensemble,
  since one small network fitted to a few dozen sessions varies with its seed about as much as it
  gains (the tournament's ``open`` pods: 48 units, three networks);
- **fit**: ``score_a = ridge(x_a) + v . relu(W z_a + b)`` with the ridge fixed (its scores an offset:
  the network fits what the ridge leaves), on the fit rows' tradable names, the target demeaned across
  names and scaled by its standard deviation; full-batch AdamW on the squared error, ``v`` started at
  zero (the first candidate is the ridge itself), ``W`` from the seeded orthogonal init. The
  normalized inputs are the policy's own (its observation statistics, fitted on the train window's fit
  rows before this), so the fitted ``W`` is the encoder's.
- **epochs, by blocked cross-validation**: the fit rows split into five contiguous blocks
  (``torch.chunk``'s: three or four at 6-8, 11, 12 and 16 rows); the network is fitted on the
  others (a row each side of the left-out block purged: a target spans to the next trade) and its
  out-of-fold information coefficient recorded every few epochs; the epoch count with the best mean
  out-of-fold IC is then fitted on all fit rows. Why not early stopping on the train
  window's held-out tail alone: at one trade a session that tail is a dozen rows, too few to choose
  an epoch or to tell a gain from noise.
- **kept only on a clear gain**: the network is kept only if, on the out-of-fold rows (each fold's
  ridge refitted on the same rows as its network, at the start's penalty) and the held-out tail
  together, ridge + network beats the ridge alone by one standard error (the paired
  difference of the two scores' per-row coefficients), else the start stays the ridge's (the
  read-out at zero: the encoder is unused).
- **the policy**: the encoder's weights on the features and bias set to ``W`` and ``b`` (zero on
  the position weight and tradable flag), the actor read-out's bias to ``v`` and its weights to zero
  (so the read-out ignores the context at first), the skip to the ridge, all times one temperature
  chosen as the ridge start's is (``top_mass`` of the book on the top 20% by the combined score), the
  cash logit's bias at the combined scores' average level.

The tournament's validation window is never read. The seed of the fit is the pod's, so fresh pods
start from different fits: a population of starts, not one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from agents.linear_start import (
    DecisionBars,
    LinearStart,
    _best_by_t,
    _row_correlations,
    start_path,
    temperature_for,
)
from agents.policy import Policy
from backtests.linear import DecisionRows, demean
from data.errors import ConfigError

#: Epochs between two checks of the cross-validated fits; contiguous blocks of the fit rows.
CHECK_EVERY = 5
FOLDS = 5


@dataclass(frozen=True)
class NonlinearStart:
    """The fitted network: ``weight (H, F)`` and ``bias (H,)`` on the normalized features, the
    read-out ``v (H,)`` in the ridge score's units, the held-out tail's IC and the epochs run."""

    weight: Tensor
    bias: Tensor
    readout: Tensor
    holdout_ic: float
    epochs: int
    pair: tuple[int, int] | None = None
    """the pair candidate's two features (:func:`fit_product`); None for the fitted networks"""

    def scores(self, z: Tensor) -> Tensor:
        """The network's part of the score, ``(..., A)``, of normalized features ``(..., A, F)``."""
        return torch.relu(z @ self.weight.T + self.bias) @ self.readout


def normalized_features(policy: Policy, x: Tensor) -> Tensor:
    """Raw features ``(..., A, F)`` as the policy's network's encoder reads them: normalized by its
    observation statistics (and clipped), then minus their mean across the assets when its encoder
    demeans them (``NetworkConfig.demean_features``)."""
    norm = policy.obs_norm
    mean = norm.mean_asset[2:].to(x.device, torch.float32)
    scale = torch.sqrt(norm.var_asset[2:] + norm.eps).to(x.device, torch.float32)
    z = ((x.to(torch.float32) - mean) / scale).clamp(-norm.clip, norm.clip)
    return z - z.mean(dim=-2, keepdim=True) if policy.config.demean_features else z


#: Units of one member network: an encoder of ``embed`` units holds ``embed // MEMBER_WIDTH`` of them,
#: fitted from their own seeds, their mean the score (an ensemble: one small network fitted to a few
#: dozen sessions varies with its seed about as much as it gains).
MEMBER_WIDTH = 16
#: Standard errors by which the network's held-out IC must beat the ridge's to be kept.
MARGIN = 1.0


def row_ics(scores: Tensor, panel: DecisionRows) -> Tensor:
    """Per-row cross-sectional Pearson correlation of ``scores (K, A)`` with ``panel``'s target (as
    ``backtests.linear.information_coefficient``, whose mean it is; 0 for a row without spread)."""
    s = demean(scores.to(torch.float64), panel.ok)
    y = demean(panel.y, panel.ok)
    den = (s.square().sum(dim=1) * y.square().sum(dim=1)).sqrt()
    use = (panel.ok.sum(dim=1) >= 3) & (den > 0)
    return torch.where(use, (s * y).sum(dim=1) / den.clamp(min=1e-300), torch.zeros_like(den))


def beats(candidate: Tensor, ridge: Tensor) -> bool:
    """Whether the per-row ICs ``candidate`` beat ``ridge``'s by :data:`MARGIN` standard errors."""
    diff = candidate - ridge
    if diff.numel() < 3:
        return False
    se = float(diff.std()) / math.sqrt(diff.numel())
    return se > 0 and float(diff.mean()) > MARGIN * se


def _refit(ridge: LinearStart, panel: DecisionRows) -> LinearStart:
    """``ridge`` refitted on ``panel`` at its own penalty, blended as it was (the zero model stays
    zero)."""
    if ridge.is_zero or not math.isfinite(ridge.penalty):
        return ridge
    coef = start_path(panel, (ridge.penalty,), ridge.blend, ridge.screen_draws, ridge.single_share)[0].to(
        torch.float32
    )
    return dataclasses.replace(ridge, coef=coef)


def _subset(panel: DecisionRows, rows: Tensor) -> DecisionRows:
    return DecisionRows(x=panel.x[rows], y=panel.y[rows], ok=panel.ok[rows])


def _scaled_target(panel: DecisionRows) -> tuple[Tensor, float]:
    """The target demeaned across names and divided by its standard deviation, and that deviation."""
    y = demean(panel.y, panel.ok)
    sd = float(y[panel.ok].std()) if int(panel.ok.sum()) > 1 else 0.0
    return (y / sd if sd > 0 else y).to(torch.float32), sd


class _Fit:
    """Full-batch fits of ``members`` networks of ``width`` units each to the ridge's residual, each
    on its own (``v`` from zero, ``W`` from the seeded orthogonal init; stacked on a leading axis,
    the loss their sum, so each one's AdamW steps are its own), their mean the score; checked every
    :data:`CHECK_EVERY` epochs on an evaluation panel."""

    def __init__(
        self, policy: Policy, ridge: LinearStart, members: int, width: int, seed: int, lr: float, wd: float
    ):
        self.policy, self.coef = policy, ridge.coef.to(torch.float32)
        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        weight = torch.empty(members, width, ridge.coef.shape[0])
        for w in weight:
            torch.nn.init.orthogonal_(w, math.sqrt(2), generator=gen)
        device = ridge.coef.device  # (the features' device: the start is fitted where they are)
        self.layer = torch.nn.Parameter(weight.to(device))
        self.bias = torch.nn.Parameter(torch.zeros(members, 1, 1, width, device=device))
        self.readout = torch.nn.Parameter(torch.zeros(members, width, device=device))
        self.opt = torch.optim.AdamW([self.layer, self.bias, self.readout], lr=lr, weight_decay=wd)

    def members(self, z: Tensor) -> Tensor:
        """``(M, K, A)``: each member's score of normalized features ``z (K, A, F)``."""
        hidden = torch.relu(torch.einsum("kaf,mhf->mkah", z, self.layer) + self.bias)
        return torch.einsum("mkah,mh->mka", hidden, self.readout)

    def net(self, z: Tensor) -> Tensor:
        return self.members(z).mean(dim=0)

    def run(self, fit: DecisionRows, epochs: int, check: DecisionRows | None = None) -> list[Tensor]:
        """Train ``epochs`` epochs on ``fit``; the per-row ICs of ridge + the members' mean on
        ``check`` at every check (none without ``check``)."""
        y, sd = _scaled_target(fit)
        z = normalized_features(self.policy, fit.x)
        offset = (fit.x.to(torch.float32) @ self.coef) / max(sd, 1e-300)
        mask = fit.ok.to(torch.float32)
        if check is not None:
            z_check = normalized_features(self.policy, check.x)
            offset_check = check.x.to(torch.float32) @ self.coef
        curve = []
        for epoch in range(1, epochs + 1):
            self.opt.zero_grad()
            ((offset + self.members(z) - y).square() * mask).sum().div(mask.sum()).backward()
            self.opt.step()
            if check is not None and epoch % CHECK_EVERY == 0:
                with torch.no_grad():
                    curve.append(row_ics(offset_check + self.net(z_check) * sd, check))
        self.sd = sd
        return curve


#: Knots of a pair candidate's piecewise-linear squares, each side of zero, at 0, 1, 2, ... spreads of
#: the square's input: the square interpolated there, linear beyond (robust to a name's outlier).
PRODUCT_KNOTS = 4
#: Units of a pair candidate: two squares of directions in the pair's plane, each side.
PRODUCT_WIDTH = 4 * PRODUCT_KNOTS


def feature_pairs(num_features: int) -> Tensor:
    """``(P, 2)``: every pair ``i <= j`` of features (the squares included)."""
    i, j = torch.triu_indices(num_features, num_features)
    return torch.stack([i, j], dim=-1)


def screened_pair(z: Tensor, residual: Tensor, ok: Tensor) -> tuple[int, int]:
    """The pair whose product ``z_i * z_j`` of normalized features ``z (K, A, F)`` best ranks
    ``residual (K, A)`` (the largest ``|t|`` of its per-row cross-sectional correlations over the
    rows: ``agents.linear_start``'s screen, over the products instead of the features)."""
    pairs = feature_pairs(z.shape[-1]).to(z.device)
    z64 = z.to(torch.float64)
    products = DecisionRows(x=z64[..., pairs[:, 0]] * z64[..., pairs[:, 1]], y=residual, ok=ok)
    i, j = pairs[_best_by_t(_row_correlations(products))].tolist()
    return int(i), int(j)


def quadratic_units(
    pair: tuple[int, int], form: Tensor, z: Tensor, ok: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``(weight (W, F), bias (W,), readout (W,))`` of :data:`PRODUCT_WIDTH` ReLU units whose
    read-out approximates the quadratic form ``q = (z_i, z_j) form (z_i, z_j)^T`` (``form (2, 2)``,
    symmetric) of two normalized features: ``form``'s eigen-decomposition writes ``q`` as ``l_1 u_1^2
    + l_2 u_2^2`` with ``u_k = e_k . (z_i, z_j)`` along its orthonormal eigenvectors ``e_k``, and
    each square ``u^2`` is interpolated at knots ``0, h, 2h, ...`` each side (``h`` the spread of
    ``u`` over ``z``'s valid names), as ``h relu(|u|) + 2h sum_k relu(|u| - k h)``. Why hand-built:
    the encoder's ReLU units can hold a quadratic of two inputs exactly this way, and a gradient fit
    of a few dozen sessions rarely finds one among 30 inputs (docs/agents.md)."""
    i, j = pair
    num_features = z.shape[-1]
    values, vectors = torch.linalg.eigh(form.to(torch.float64).cpu())
    weights, biases, readouts = [], [], []
    for k in range(2):
        direction = torch.zeros(num_features, dtype=torch.float32, device=z.device)
        direction[i] += float(vectors[0, k])
        direction[j] += float(vectors[1, k])
        u = z.to(torch.float32) @ direction
        h = float(u[ok].std()) if int(ok.sum()) > 1 else 0.0
        h = h if h > 0 else 1.0
        for side in (1.0, -1.0):
            for knot in range(PRODUCT_KNOTS):
                weights.append(side * direction)
                biases.append(-knot * h)
                readouts.append(float(values[k]) * (h if knot == 0 else 2.0 * h))
    device = z.device
    return torch.stack(weights), torch.tensor(biases, device=device), torch.tensor(readouts, device=device)


#: The quadratic form of a product ``z_i * z_j`` (:func:`quadratic_units`).
PRODUCT_FORM = torch.tensor([[0.0, 0.5], [0.5, 0.0]])


def product_units(pair: tuple[int, int], z: Tensor, ok: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`quadratic_units` of the product ``z_i * z_j = ((z_i + z_j)^2 - (z_i - z_j)^2) / 4``."""
    return quadratic_units(pair, PRODUCT_FORM, z, ok)


def pair_form(pair: tuple[int, int], z: Tensor, residual: Tensor, ok: Tensor) -> Tensor:
    """``(2, 2)``: the quadratic form of the pair's product and its two squares fitted to
    ``residual (K, A)`` by least squares, pooled over the rows' valid names, each of the three columns
    and the residual demeaned across names (the minimum-norm solution where they coincide: a square's
    pair, ``i == j``)."""
    i, j = pair
    z64 = z.to(torch.float64)
    columns = torch.stack([z64[..., i] * z64[..., j], z64[..., i].square(), z64[..., j].square()], dim=-1)
    columns = torch.stack([demean(columns[..., c], ok) for c in range(3)], dim=-1)[ok]
    target = demean(residual.to(torch.float64), ok)[ok]
    if columns.shape[0] < 3:
        return torch.zeros(2, 2, dtype=torch.float64)
    product, square_i, square_j = torch.linalg.lstsq(
        columns.cpu(), target.cpu().unsqueeze(-1), driver="gelsd"
    ).solution.squeeze(-1)
    return torch.stack([torch.stack([square_i, product / 2]), torch.stack([product / 2, square_j])])


def fit_product(policy: Policy, ridge: LinearStart, panel: DecisionRows) -> NonlinearStart:
    """The pair candidate of ``panel``: the pair screened by its product on what the ridge leaves
    (:func:`screened_pair`), the quadratic of its product and two squares fitted to that residual
    (:func:`pair_form`), written into units (:func:`quadratic_units`) whose read-out is scaled by the
    least squares fit of the residual, in the ridge score's units (as the networks are)."""
    y, sd = _scaled_target(panel)
    z = normalized_features(policy, panel.x)
    ridge_scores = panel.x.to(torch.float64) @ ridge.coef.to(torch.float64)
    residual = y.to(torch.float64) - ridge_scores / max(sd, 1e-300)
    pair = screened_pair(z, residual, panel.ok)
    weight, bias, readout = quadratic_units(pair, pair_form(pair, z, residual, panel.ok), z, panel.ok)
    unit = NonlinearStart(weight=weight, bias=bias, readout=readout, holdout_ic=0.0, epochs=0, pair=pair)
    g = demean(unit.scores(z.to(torch.float32)).to(torch.float64), panel.ok)
    r = demean(residual, panel.ok)
    den = float(g.square().sum())
    scale = float((g * r).sum()) / den if den > 0 else 0.0
    return dataclasses.replace(unit, readout=readout * scale * sd)


def _folds(rows: int) -> list[tuple[Tensor, Tensor]]:
    """``(train rows, held block)`` of each contiguous block, a row purged each side of the held block
    (a target spans to the next trade). The blocks are ``torch.chunk``'s: :data:`FOLDS` of them at
    every row count from 5 but 6-8, 11, 12 and 16 (where chunks of ``ceil(rows / FOLDS)`` rows make
    three or four), the last block the shortest."""
    out = []
    for block in torch.arange(rows).chunk(FOLDS):
        keep = torch.ones(rows, dtype=torch.bool)
        keep[max(0, int(block[0]) - 1) : int(block[-1]) + 2] = False
        out.append((torch.nonzero(keep).squeeze(-1), block))
    return out


def _padded(start: NonlinearStart, hidden: int) -> NonlinearStart:
    """``start``'s units padded with unused ones (zero weights and read-out) to ``hidden``."""
    pad = hidden - start.weight.shape[0]
    return dataclasses.replace(
        start,
        weight=torch.nn.functional.pad(start.weight, (0, 0, 0, pad)),
        bias=torch.nn.functional.pad(start.bias, (0, pad)),
        readout=torch.nn.functional.pad(start.readout, (0, pad)),
    )


Folds = list[tuple[Tensor, Tensor, LinearStart]]


def fold_ridges(fit: DecisionRows, ridge: LinearStart) -> Folds:
    """Each of the :data:`FOLDS` folds of ``fit`` (:func:`_folds`) with ``ridge`` refitted on its
    train rows: the ridge every candidate adds to in that fold, and is judged against."""
    return [(rows, block, _refit(ridge, _subset(fit, rows))) for rows, block in _folds(fit.x.shape[0])]


def _product_candidate(
    policy: Policy, fit: DecisionRows, tail: DecisionRows, ridge: LinearStart, folds: Folds
) -> tuple[NonlinearStart, Tensor]:
    """The pair candidate fitted on ``fit`` and its per-row ICs (ridge + pair): out of fold (each
    fold's pair screened and fitted on that fold's rows alone, beside its refitted ridge), then on
    ``tail``."""
    rows = []
    for train_rows, block, fold_ridge in folds:
        train, held = _subset(fit, train_rows), _subset(fit, block)
        fold = fit_product(policy, fold_ridge, train)
        z_held = normalized_features(policy, held.x)
        score = held.x.to(torch.float32) @ fold_ridge.coef + fold.scores(z_held)
        rows.append(row_ics(score, held))
    final = fit_product(policy, ridge, fit)
    tail_score = ridge.scores(tail.x.to(torch.float32)) + final.scores(normalized_features(policy, tail.x))
    tail_rows = row_ics(tail_score, tail)
    rows.append(tail_rows)
    return dataclasses.replace(final, holdout_ic=float(tail_rows.mean())), torch.cat(rows)


def _members(policy: Policy) -> tuple[int, int]:
    """``(members, width)``: the member networks the policy's encoder holds and their units each."""
    hidden = int(policy.config.embed)
    width = min(hidden, MEMBER_WIDTH)
    return max(1, hidden // width), width


def fold_curves(
    policy: Policy, fit: DecisionRows, folds: Folds, seed: int, fitting: dict
) -> list[list[Tensor]]:
    """Each fold's member networks fitted on its train rows (beside its refitted ridge) and their
    held block's per-row ICs (ridge + networks) at every check: the cross-validation curves."""
    members, width = _members(policy)
    curves = []
    for train_rows, block, fold_ridge in folds:
        train, held = _subset(fit, train_rows), _subset(fit, block)
        net = _Fit(policy, fold_ridge, members, width, seed, fitting["lr"], fitting["wd"])
        curves.append(net.run(train, fitting["epochs"], held))
    return curves


def crossfit_rows(curves: list[list[Tensor]]) -> Tensor:
    """Out-of-fold per-row ICs of :func:`fold_curves`, each fold's held block read at the check of
    the best mean IC of the *other* folds' held blocks: the epoch is chosen without the rows it is
    judged on (partly: those folds' networks were trained on rows that include the judged block; a
    nested cross-validation, five times the fits, would not be)."""
    rows = []
    for f, curve in enumerate(curves):
        others = [c for g, c in enumerate(curves) if g != f]
        means = [float(torch.cat([c[k] for c in others]).mean()) for k in range(len(curve))]
        rows.append(curve[max(range(len(means)), key=means.__getitem__)])
    return torch.cat(rows)


def _network_candidate(
    policy: Policy,
    fit: DecisionRows,
    tail: DecisionRows,
    ridge: LinearStart,
    curves: list[list[Tensor]],
    seed: int,
    fitting: dict,
    crossfit: bool = False,
) -> tuple[NonlinearStart, Tensor]:
    """The member networks fitted on ``fit`` at the epochs of the best mean out-of-fold IC of
    ``curves`` (:func:`fold_curves`) and their per-row ICs (ridge + networks; out of fold at those
    epochs, or with ``crossfit`` each fold's at the epochs the other folds choose
    (:func:`crossfit_rows`), then on ``tail``)."""
    members, width = _members(policy)
    out_of_fold = [torch.cat([curve[c] for curve in curves]) for c in range(len(curves[0]))]
    best = max(range(len(out_of_fold)), key=lambda c: float(out_of_fold[c].mean()))
    final = _Fit(policy, ridge, members, width, seed, fitting["lr"], fitting["wd"])
    final.run(fit, (best + 1) * CHECK_EVERY)
    with torch.no_grad():
        tail_net = final.net(normalized_features(policy, tail.x)) * final.sd
        tail_rows = row_ics(ridge.scores(tail.x.to(torch.float32)) + tail_net, tail)
    network = NonlinearStart(
        weight=final.layer.detach().reshape(members * width, -1).to(fit.x.device),
        bias=final.bias.detach().reshape(-1).to(fit.x.device),
        readout=(final.readout.detach().reshape(-1) / members).to(fit.x.device) * final.sd,
        holdout_ic=float(tail_rows.mean()),
        epochs=(best + 1) * CHECK_EVERY,
    )
    judged = crossfit_rows(curves) if crossfit else out_of_fold[best]
    return network, torch.cat([judged, tail_rows])


def ridge_rows(fit: DecisionRows, tail: DecisionRows, ridge: LinearStart, folds: Folds) -> Tensor:
    """The ridge's per-row ICs on the rows the candidates are judged on: out of fold (each fold's
    refitted ridge), then on ``tail``."""
    rows = []
    for _, block, fold_ridge in folds:
        held = _subset(fit, block)
        rows.append(row_ics(held.x.to(torch.float32) @ fold_ridge.coef, held))
    rows.append(row_ics(ridge.scores(tail.x.to(torch.float32)), tail))
    return torch.cat(rows)


def fit_nonlinear_start(
    policy: Policy,
    fit: DecisionRows,
    tail: DecisionRows,
    ridge: LinearStart,
    *,
    seed: int,
    epochs: int = 300,
    learning_rate: float = 3e-3,
    weight_decay: float = 1e-3,
    products: bool = False,
    crossfit: bool = False,
) -> NonlinearStart | None:
    """The network fitted to the ridge's residual on ``fit``, its epochs chosen by blocked
    cross-validation on ``fit`` (:data:`FOLDS` contiguous blocks, a row purged on each side of the
    left-out block); None when the out-of-fold and held-out ICs of ridge + network do not beat the
    ridge's by :data:`MARGIN` standard errors (module docstring). With ``products`` the quadratic of
    a screened pair of features (:func:`fit_product`) is a second candidate, judged on the same rows
    by the same rule; of the candidates that beat the ridge, the one of the larger mean IC on those
    rows is kept. With ``crossfit`` the networks are judged, and compared, on out-of-fold rows read
    at the epochs the other folds choose (:func:`crossfit_rows`), not at the epoch chosen on those
    rows themselves (which lifts their paired ``t`` on markets with nothing to find:
    ``benchmarks/nonlinear_start_size.py``)."""
    hidden, rows = int(policy.config.embed), fit.x.shape[0]
    if rows < 2 * FOLDS or int(fit.ok.sum()) <= fit.x.shape[-1] or int(tail.ok.sum()) == 0:
        return None
    if not _scaled_target(fit)[1] > 0:
        return None
    fitting = {"epochs": epochs, "lr": learning_rate, "wd": weight_decay}
    folds = fold_ridges(fit, ridge)
    curves = fold_curves(policy, fit, folds, seed, fitting)
    candidates = [_network_candidate(policy, fit, tail, ridge, curves, seed, fitting, crossfit)]
    if products and hidden >= PRODUCT_WIDTH:
        candidates.append(_product_candidate(policy, fit, tail, ridge, folds))
    baseline = ridge_rows(fit, tail, ridge, folds)
    passing = [(c, r) for c, r in candidates if beats(r, baseline)]
    if not passing:
        return None
    kept, _ = max(passing, key=lambda cr: float(cr[1].mean()))
    return _padded(kept, hidden)


@torch.no_grad()
def apply_nonlinear_start(
    policy: Policy, ridge: LinearStart, start: NonlinearStart, d: DecisionBars, rows: Tensor, mass: float
) -> float:
    """Set ``policy``'s encoder, read-out, skip and cash logit to ridge + network (module docstring;
    its observation statistics fitted already), the temperature and level read on decision ``rows``
    (the fit rows it trades at); returns the temperature."""
    net, norm = policy.net, policy.obs_norm
    if policy.config.asset_layers != 1 or not policy.config.linear_skip:
        raise ConfigError("the nonlinear start needs asset_layers = 1 and the linear start")
    x = d.features[rows]
    combined = ridge.scores(x) + start.scores(normalized_features(policy, x))
    temperature = temperature_for(combined, d.tradable[rows], mass)
    if temperature <= 0.0:
        return 0.0
    sd = torch.sqrt(norm.var_asset[2:] + norm.eps)
    skip = torch.zeros_like(net.asset_skip.weight)
    skip[0, 2:] = temperature * ridge.coef.to(sd.device) * sd
    net.asset_skip.weight.copy_(skip)
    encoder = net.encoder[0]
    encoder.weight.zero_()
    encoder.weight[:, 2:] = start.weight
    encoder.bias.copy_(start.bias)
    net.actor_readout.weight.zero_()
    net.actor_readout.bias.copy_(temperature * start.readout)
    net.actor_cash.weight.zero_()
    # the network's asset logit: T * (coef . (x - mean) + v . h); the cash logit at its average level
    level = combined.mean() - (ridge.coef.to(sd.device) * norm.mean_asset[2:]).sum()
    net.actor_cash.bias.fill_(float(temperature * level))
    return temperature
