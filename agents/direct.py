"""Direct policy search: a pod trained by the gradient of its portfolio's net return.

The env's prices do not depend on the agent (impact aside), so a decision's net return is a
differentiable function of the target weights: the holdings drift from the decision bar's close to
the fill bar's open, the rebalance pays a cost on the traded weight, and the new holdings earn the
assets' returns to the next decision bar's close. This learner simulates that accounting in torch over
paths of ``horizon`` decisions of the train window and follows the gradient of an objective of the
net returns through the whole path (the turnover a decision causes is paid again by the next one, so
the gradient sees it), the direct approach of EIIE (Jiang et al. 2017) and of deep momentum networks
(Lim et al. 2019). No reward, value function or sampling: the deterministic action is what is trained.

- **policy**: the standard :class:`agents.policy.Policy` (the per-asset network of ``agents.networks``,
  its observation normalizer, ``"weights"`` actions: a softmax over the assets' logits and cash, moved
  ``rebalance_rate`` of the way from the current weights), so backtests, export and paper trading run
  it as they run a PPO pod. The observations the simulation feeds it are the env's own layout
  (``envs.observation``): cash fraction, time of day, and per asset its weight at the decision bar's
  close, its tradable flag and its features.
- **costs**: every unit of traded weight pays ``(slippage_bps + spread_bps) / 1e4`` (the constant
  half-spread, also with ``spread = "estimate"``, whose per-name estimate only the env charges) plus the broker's
  fee rate of its side (the env's fee profile: ``EnvParams.buy_fee_rate`` / ``sell_fee_rate``); the square-root impact (small at the default account
  size) and the volume cap are left to the scoring backtest, which runs the env itself. The weight
  cap ``max_weight`` is applied as the env applies it (the excess stays in cash).
- **objective** (``objective``): ``"active_sharpe"`` (default), the Sharpe ratio of the per-decision
  net return in excess of the equal-weight portfolio of the same bars held at the book's own invested
  share, over all paths of a batch: the cross-sectional edge, not the market's move, which a long-only
  book cannot escape and which cash would otherwise earn on in a fall; ``"excess_sharpe"``: the excess
  over equal weight fully invested; ``"sharpe"``: the Sharpe ratio of the net returns themselves;
  ``"invested_sharpe"``: the Sharpe ratio of the net return with the book's cash share earning equal
  weight's return, the whole book's Sharpe ratio (the market's move included, as the test reads it)
  where holding cash buys no safety, so the selection's return is weighed against the market's risk
  instead of shrinking with the exposure.
- **what moves** (``finetune``): every weight, the linear skip alone (the start's linear score
  re-weighted for the traded objective, the network fixed), or the trading rule alone (``"rule"``:
  two numbers, the logits' scale and the rebalance rate, each a log-offset from the start's; the
  network fixed; :class:`agents.finetune_modes.Rule`).
- **regularization and stopping**: AdamW's weight decay; the last ``holdout_frac`` of the train
  window's decisions is never trained on: every ``holdout_every`` updates the policy is run over it
  from cash (the same simulation, no gradient) and the weights with the best held-out objective are the
  result (early stopping inside the train window; the tournament's validation window stays the
  tournament's). A warm start (the ridge, or a parent) is a candidate itself, and a fine-tuned one
  replaces it only if its held-out per-decision series beats the start's by ``holdout_margin``
  standard errors of their paired difference: the tail is short (a few hundred decisions, a dozen
  for a policy that trades once a session), the objective is looked at every ``holdout_every``
  updates, and without a bar the best of those looks is often a step that won the tail by chance.
- **observation statistics**: a fresh policy's normalizer is fitted on the observations of its first
  ``norm_updates`` updates and frozen after (a warm start keeps its source's), so the weights kept by
  the early stopping see the inputs they were trained on.
- **budget**: one env-step is one simulated decision of one path (held-out runs included), the unit
  of every learner's ``total_steps``.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from agents.args import Benchmark, DirectArgs
from agents.checkpoint import Checkpoint
from agents.finetune_modes import RULE_LR, Average, Rule, frozen, set_config
from agents.linear_start import LinearStart, apply_linear_start, fit_linear_start, start_panels
from agents.nonlinear_start import apply_nonlinear_start, fit_nonlinear_start
from agents.policy import Policy
from agents.training import ADAM_EPS, Callback, EvalFn, EvalHook, TrainResult, notify, policy_for_env
from backtests.linear import top_weights
from data.errors import ConfigError


@dataclass(frozen=True)
class Decisions:
    """The decision bars of a window as the simulation reads them, row ``k`` = bar ``k * interval``:
    ``features (K, A, F)``, ``tradable (K, A)`` (the decision bar's flag, as in the observation),
    ``fill_ok (K, A)`` (tradable at the fill bar), ``time_of_day (K,)``, ``gap (K, A)`` (close of the
    decision bar to open of the fill bar) and ``hold (K, A)`` (fill bar's open to the mark's close)."""

    features: Tensor
    tradable: Tensor
    fill_ok: Tensor
    time_of_day: Tensor
    gap: Tensor
    hold: Tensor

    @property
    def num(self) -> int:
        return int(self.features.shape[0])


def decisions_of(market: Any, interval: int) -> Decisions:
    """:class:`Decisions` of every decision bar of ``market`` whose mark lies inside it."""
    bars = torch.arange(0, market.num_steps - interval, interval, device=market.device)
    if bars.numel() < 2:
        raise ConfigError(f"a window of {market.num_steps} bars holds too few decisions to train on")
    close_t = market.close.index_select(0, bars).to(torch.float32)
    open_f = market.open.index_select(0, bars + 1).to(torch.float32)
    close_m = market.close.index_select(0, bars + interval).to(torch.float32)
    safe = lambda x: torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)  # noqa: E731
    return Decisions(
        features=safe(market.features.index_select(0, bars).to(torch.float32)),
        tradable=market.tradable.index_select(0, bars),
        fill_ok=market.tradable.index_select(0, bars + 1),
        time_of_day=market.time_of_day.index_select(0, bars).to(torch.float32),
        gap=safe(open_f / close_t - 1.0),
        hold=safe(close_m / open_f - 1.0),
    )


def cost_per_turnover(params: Any) -> tuple[float, float]:
    """What one unit of traded weight pays in the env, bought and sold: slippage and half-spread plus
    the broker's fee rate on that side (``EnvParams.buy_fee_rate`` / ``sell_fee_rate``; the per-share
    fee on sells, a fraction of a basis point, is left to the scoring backtest)."""
    friction = (float(params.slippage_bps) + float(params.spread_bps)) * 1e-4
    return friction + float(params.buy_fee_rate), friction + float(params.sell_fee_rate)


def observation(weights: Tensor, d: Decisions, rows: Tensor) -> Tensor:
    """The env's observation ``(B, obs_dim)`` of paths at decision rows ``rows (B,)`` holding
    ``weights (B, A)`` (position value / marked value at the decision bar's close)."""
    b, a = weights.shape
    cash = 1.0 - weights.sum(dim=-1, keepdim=True)
    glob = torch.cat([cash, d.time_of_day[rows].unsqueeze(-1)], dim=-1)
    per_asset = torch.cat(
        [weights.unsqueeze(-1), d.tradable[rows].to(weights.dtype).unsqueeze(-1), d.features[rows]], dim=-1
    )
    return torch.cat([glob, per_asset.reshape(b, -1)], dim=-1)


def simulate(
    policy: Policy,
    d: Decisions,
    starts: Tensor,
    horizon: int,
    params: Any,
    *,
    fit_norm: bool = False,
    benchmark: Benchmark = "market",
    rule: Rule | None = None,
) -> tuple[Tensor, Tensor]:
    """Paths of ``horizon`` decisions from ``starts (B,)``, each from cash: ``(net (B, L), equal
    (B, L))``, the policy's net return per decision and the equal-weight portfolio's gross return on the
    same bars; differentiable in the policy's weights. ``benchmark`` (:data:`BENCHMARKS`) says which
    equal-weight return ``equal`` is: ``"market"``, fully invested; ``"exposure"``, held at the
    policy's own exposure (its invested share through the gap, then through the hold), so that
    ``net - equal`` is the return of the book's selection alone; ``"uninvested"``, that one less the
    fully invested one (minus the market's move on the book's cash share), so that ``net - equal`` is
    the net return with the cash share earning equal weight's return. ``fit_norm``: fold the
    observations into the policy's normalizer statistics first. ``rule``: trade by that rule's logit
    scale and rebalance rate (differentiable in them), not by the policy's own."""
    a = policy.num_assets
    buy_cost, sell_cost = cost_per_turnover(params)
    cap = float(params.max_weight)
    w = torch.zeros(starts.shape[0], a, device=d.features.device)
    nets, equals = [], []
    for j in range(horizon):
        rows = starts + j
        obs = observation(w, d, rows)
        if fit_norm:
            policy.obs_norm.update(obs.detach())
        logits = policy.net.actor_mean(policy.obs_norm.normalize(obs))[:, : policy.raw_dim]
        if rule is None:
            target = policy.to_action(logits, obs)
        else:
            target = policy.to_action(logits * rule.scale(), obs, rate=rule.rate())
        if cap < 1.0:
            target = target.clamp(max=cap)
        gap, hold, fill_ok = d.gap[rows], d.hold[rows], d.fill_ok[rows]
        grow_gap = 1.0 + (w * gap).sum(dim=-1)  # value at the fill bar's open / value at the decision
        w_open = w * (1.0 + gap) / grow_gap.unsqueeze(-1)
        target = torch.where(fill_ok, target, w_open)  # no order fills on an untradable bar
        traded = target - w_open
        paid = (traded.clamp(min=0.0) * buy_cost + (-traded).clamp(min=0.0) * sell_cost).sum(dim=-1)
        grow_hold = 1.0 + (target * hold).sum(dim=-1)
        nets.append(grow_gap * (1.0 - paid) * grow_hold - 1.0)
        live = fill_ok.to(hold.dtype)
        if benchmark != "exposure":  # the equal-weight book fully invested
            equal = ((1.0 + gap) * (1.0 + hold) - 1.0) * live
        if benchmark != "market":  # the equal-weight book at the policy's exposure: its share of the move
            gap_in, hold_in = w.sum(dim=-1, keepdim=True), target.sum(dim=-1, keepdim=True)
            held = ((1.0 + gap_in * gap) * (1.0 + hold_in * hold) - 1.0) * live
            equal = held if benchmark == "exposure" else held - equal
        equals.append(equal.sum(dim=-1) / live.sum(dim=-1).clamp(min=1.0))
        w = target * (1.0 + hold) / grow_hold.unsqueeze(-1)
    return torch.stack(nets, dim=1), torch.stack(equals, dim=1)


def objective_of(net: Tensor, equal: Tensor, kind: str) -> Tensor:
    """The Sharpe ratio (per decision, not annualized) of the net returns or of their excess over
    equal weight, over every decision of every path."""
    x = objective_series(net, equal, kind).reshape(-1)
    return x.mean() / (x.std() + 1e-8)


def adamw_for(policy: Policy, args: DirectArgs, state: dict | None) -> torch.optim.AdamW:
    """AdamW over the network; a restored state keeps its moments and takes this run's settings."""
    opt = torch.optim.AdamW(
        policy.net.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay, eps=ADAM_EPS
    )
    if state is not None:
        try:
            opt.load_state_dict(state)
        except (ValueError, KeyError, RuntimeError) as err:
            raise ConfigError(f"cannot restore the optimizer state: {err}") from None
        for group in opt.param_groups:
            group.update(lr=args.learning_rate, weight_decay=args.weight_decay, eps=ADAM_EPS)
            for key in ("fused", "foreach"):
                group[key] = None
    return opt


def _gradient_step(
    policy: Policy,
    opt: torch.optim.Optimizer,
    decisions: Decisions,
    starts: Tensor,
    horizon: int,
    params: Any,
    args: DirectArgs,
    fit_norm: bool,
    rule: Rule | None = None,
) -> float:
    """One update: simulate the paths from ``starts``, climb the objective's gradient (of what
    ``opt`` steps: the network's trainable weights, or ``rule``'s two numbers); returns the objective
    before the step."""
    net, equal = simulate(
        policy,
        decisions,
        starts.to(decisions.features.device),
        horizon,
        params,
        fit_norm=fit_norm,
        benchmark=benchmark_of(args.objective),
        rule=rule,
    )
    loss = -objective_of(net, equal, args.objective)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    # AdamW leaves a tensor without a gradient as it is, no decay either (``frozen``'s tensors)
    stepped = [t for group in opt.param_groups for t in group["params"] if t.grad is not None]
    torch.nn.utils.clip_grad_norm_(stepped, args.max_grad_norm)
    opt.step()
    if rule is not None:
        rule.project()
    return float(-loss.detach())


def start_from_linear(
    policy: Policy, decisions: Decisions, fit_rows: int, args: DirectArgs, start: LinearStart | None = None
) -> LinearStart:
    """Warm-start a fresh policy from the ridge of the train window's fit rows (agents.linear_start):
    the observation statistics fitted on the book its top quantile holds (equal weights for the zero
    model), then the skip set. ``start``: that ridge already fitted (the same rows, ``top_mass`` and
    ``start_horizon``: a population's fresh pods share it); returns the ridge."""
    start = start or fit_linear_start(
        decisions,
        fit_rows,
        args.top_mass,
        args.start_horizon,
        args.trade_window,
        args.start_blend,
        args.start_screen_draws,
        args.start_single_share,
    )
    rows = torch.arange(fit_rows, device=decisions.features.device)
    tradable = decisions.tradable[:fit_rows]
    if start.is_zero:
        held = tradable.to(torch.float32) / tradable.sum(dim=-1, keepdim=True).clamp(min=1)
    else:
        held = top_weights(start.scores(decisions.features[:fit_rows]), tradable)
    policy.obs_norm.update(observation(held, decisions, rows))
    apply_linear_start(policy, start, decisions, fit_rows)
    if args.nonlinear_start:
        fit, tail, trades = start_panels(decisions, fit_rows, args.start_horizon, args.trade_window)
        network = fit_nonlinear_start(
            policy,
            fit,
            tail,
            start,
            seed=args.seed,
            products=args.start_products,
            crossfit=args.start_crossfit,
        )
        if network is not None:
            apply_nonlinear_start(policy, start, network, decisions, trades, args.top_mass)
    return start


def _holdout(
    policy: Policy, decisions: Decisions, fit_rows: int, params: Any, kind: str
) -> tuple[float, Tensor]:
    """The objective of the policy run from cash over the held-out decisions ``[fit_rows, K)``, and
    the per-decision series it is the Sharpe ratio of (``(K - fit_rows,)``)."""
    start = torch.tensor([fit_rows], device=decisions.features.device)
    with torch.no_grad():
        net, equal = simulate(
            policy, decisions, start, decisions.num - fit_rows, params, benchmark=benchmark_of(kind)
        )
    return float(objective_of(net, equal, kind)), objective_series(net, equal, kind).reshape(-1)


#: What :func:`simulate`'s ``equal`` is, per objective (``DirectArgs.objective``).
BENCHMARKS: dict[str, Benchmark] = {
    "sharpe": "market",
    "excess_sharpe": "market",
    "active_sharpe": "exposure",
    "invested_sharpe": "uninvested",
}


def benchmark_of(kind: str) -> Benchmark:
    """The equal-weight return :func:`simulate` gives beside the net for the objective ``kind``."""
    return BENCHMARKS[kind]


def objective_series(net: Tensor, equal: Tensor, kind: str) -> Tensor:
    """What :func:`objective_of` takes the Sharpe ratio of: the net returns or their excess over the
    benchmark :func:`simulate` gave as ``equal`` (:func:`benchmark_of`): equal weight, equal weight
    at the book's exposure (``"active_sharpe"``), or minus the market's move on the book's cash share
    (``"invested_sharpe"``)."""
    return net if kind == "sharpe" else net - equal


def paired_t(candidate: Tensor, base: Tensor) -> Tensor:
    """The t-statistic of the mean per-decision difference of ``candidate`` over ``base`` (``(..., L)``,
    the same held-out decisions) -> ``(...)``; 0 where the two are identical."""
    diff = candidate - base
    se = diff.std(dim=-1) / math.sqrt(max(diff.shape[-1], 1))
    return torch.where(se > 0, diff.mean(dim=-1) / se.clamp(min=1e-12), torch.zeros_like(se))


def clears_start(series: Tensor, start: Tensor | None, margin: float) -> bool:
    """A fine-tuned candidate may replace the warm start only if its held-out series beats the start's
    by ``margin`` standard errors of their paired per-decision difference (``margin`` 0, or no warm
    start: any better objective)."""
    return start is None or margin <= 0 or float(paired_t(series, start)) > margin


class _HeldOut:
    """The held-out early stopping of :func:`train`: the best weights (and config, where a
    ``"rule"`` fine-tuning's rebalance rate lives) so far by the held-out objective, and the warm
    start's held-out series, the bar a fine-tuned candidate must clear (:func:`clears_start`)."""

    def __init__(
        self, policy: Policy, decisions: Decisions, fit_rows: int, params: Any, args: DirectArgs
    ) -> None:
        self.policy, self.decisions, self.fit_rows, self.params, self.args = (
            policy,
            decisions,
            fit_rows,
            params,
            args,
        )
        self.best: tuple[float, dict[str, Any], Any] | None = None
        self.start: Tensor | None = None

    def offer(self, warm: bool = False) -> float:
        """Run the policy over the held-out tail and keep its weights if they are the best so far
        (``warm``: the warm start, whose series becomes the bar); returns the held-out objective."""
        score, series = _holdout(self.policy, self.decisions, self.fit_rows, self.params, self.args.objective)
        better = math.isfinite(score) and (self.best is None or score > self.best[0])
        if better and (warm or clears_start(series, self.start, self.args.holdout_margin)):
            self.best = (score, copy.deepcopy(self.policy.net.state_dict()), self.policy.config)
            if warm:
                self.start = series
        return score

    def restore(self, history: list[dict[str, float]]) -> None:
        """Load the kept weights and config (and log their held-out objective on the last row)."""
        if self.best is not None:
            self.policy.net.load_state_dict(self.best[1])
            set_config(self.policy, self.best[2])
            if history:
                history[-1]["charts/holdout_best"] = self.best[0]


def train(
    args: DirectArgs,
    env: Any,
    callbacks: Iterable[Callback] = (),
    init: Policy | Checkpoint | None = None,
    eval_fn: EvalFn | None = None,
) -> TrainResult:
    """Train a policy on ``env``'s market (its train window) by direct policy search (module
    docstring); the signature of every learner's ``train``. ``env`` is read, never stepped: its
    ``market``, ``params`` and ``device``."""
    callbacks = list(callbacks)
    params = env.params
    if getattr(params, "action_mode", "weights") != "weights":
        raise ConfigError('the direct learner trains "weights" policies (set [env] action_mode = "weights")')
    policy, opt_state = policy_for_env(init, env, args, "direct")
    if args.finetune == "skip" and not policy.config.linear_skip:
        raise ConfigError('finetune = "skip" needs a policy with the linear skip (linear_start = true)')
    if args.finetune == "rule" and args.average_weights:
        raise ConfigError('finetune = "rule" moves no weights to average: drop average_weights')
    policy.train()
    decisions = decisions_of(env.market, int(params.decision_interval))
    fit_rows = decisions.num - max(1, int(round(decisions.num * args.holdout_frac)))
    if fit_rows < 2:
        raise ConfigError(f"the train window's {decisions.num} decisions are too few for the direct learner")
    if init is None and args.linear_start:
        start_from_linear(policy, decisions, fit_rows, args)
    with frozen(policy, args.finetune):
        return _train(args, policy, opt_state, decisions, fit_rows, params, callbacks, eval_fn)


def _train(
    args: DirectArgs,
    policy: Policy,
    opt_state: dict | None,
    decisions: Decisions,
    fit_rows: int,
    params: Any,
    callbacks: list[Callback],
    eval_fn: EvalFn | None,
) -> TrainResult:
    """:func:`train`'s loop over ``policy``, made and started (and its tensors frozen) by it."""
    held_out, horizon = decisions.num - fit_rows, min(args.horizon, fit_rows)
    opt = adamw_for(policy, args, opt_state)  # (under "rule": handed back as it came)
    rule = Rule(policy) if args.finetune == "rule" else None
    stepper = opt if rule is None else torch.optim.AdamW(rule.parameters(), lr=RULE_LR, weight_decay=0.0)
    gen = torch.Generator(device="cpu").manual_seed(int(args.seed))
    hook = EvalHook(eval_fn, args.eval_every)
    fit_norm_left = args.norm_updates if policy.obs_norm.count == 0 else 0
    env_steps, updates, stopped = 0, 0, False
    kept = _HeldOut(policy, decisions, fit_rows, params, args)
    mean = Average(policy) if args.average_weights else None

    def judged() -> contextlib.AbstractContextManager:
        """What a look and an eval judge: the averaged weights, the rule's policy, or the network."""
        if rule is not None:
            return rule.loaded(policy)
        return mean.loaded() if mean is not None else contextlib.nullcontext()

    if fit_norm_left == 0:  # a warm start (from the ridge or a parent) is a candidate itself
        kept.offer(warm=True)
        env_steps += held_out
        if mean is not None:
            mean.add()
    history: list[dict[str, float]] = []
    start = time.monotonic()
    while env_steps < args.total_steps:
        starts = torch.randint(0, fit_rows - horizon + 1, (args.batch_paths,), generator=gen)
        climbed = _gradient_step(
            policy, stepper, decisions, starts, horizon, params, args, fit_norm_left > 0, rule
        )
        fit_norm_left = max(0, fit_norm_left - 1)
        updates += 1
        env_steps += args.batch_paths * horizon
        row: dict[str, float] = {
            "env_steps": float(env_steps),
            "update": float(updates),
            "losses/objective": climbed,
            "charts/sps": env_steps / max(time.monotonic() - start, 1e-9),
        }
        last = env_steps >= args.total_steps
        if mean is not None and fit_norm_left == 0:
            mean.add()
        if fit_norm_left == 0 and (updates % args.holdout_every == 0 or last):
            with judged():
                row["charts/holdout_objective"] = kept.offer()
            env_steps += held_out
        if hook.due(env_steps, last):  # (what the looks judge)
            with judged():
                row.update(hook.run(policy, env_steps))
        history.append(row)
        go_on = True
        if any(key.startswith("eval/") for key in row):
            go_on = notify(callbacks, {"event": "eval", **row})
        if not notify(callbacks, {"event": "update", **row}) or not go_on:
            stopped = not last
            break
    kept.restore(history)
    hook.finish(policy, history)
    policy.eval()
    return TrainResult(
        policy=policy,
        optimizer_state=opt.state_dict(),
        env_steps=env_steps,
        history=history,
        updates=updates,
        stopped_by_callback=stopped,
    )
