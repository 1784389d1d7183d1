"""A slow, plain-Python, single-environment version of ``envs.trading``, written from its docstring.

Floats and loops only (no tensor arithmetic): the parity tests step it next to the batched env and
compare cash, holdings, value, reward and observation; the benchmark reports how much faster the
batched env is. Market rows are read with ``.tolist()`` one bar at a time.
"""

from __future__ import annotations

import math

from data.calendar import session_dates
from data.market import MarketData
from envs.fees import rates_on_date, round_up_cent
from envs.observation import CASH, FEATURES, NUM_GLOBAL, TIME_OF_DAY, TRADABLE, WEIGHT, asset_width, obs_dim
from envs.trading import EnvParams, last_decision_bar, start_high

_MASK64 = (1 << 64) - 1
_LCG_MUL = 6364136223846793005
_LCG_INC = 1442695040888963407


class ReferenceEnv:
    """One trading environment; ``step(action)`` follows the documented semantics literally."""

    def __init__(self, market: MarketData, params: EnvParams, start: int, rng: int) -> None:
        self.market = market.to("cpu")
        self.params = params
        self.num_assets = market.num_assets
        self.num_steps = market.num_steps
        self.rng = rng & _MASK64  # generator state as an unsigned 64-bit integer
        self._begin(start)

    # --- helpers -----------------------------------------------------------------------------
    def _begin(self, start: int) -> None:
        self.t = start
        self.cash = float(self.params.initial_cash)
        self.shares = [0.0] * self.num_assets
        self.value = self.cash
        self.peak = self.cash
        self.step_count = 0
        self.sharpe_a = 0.0
        self.sharpe_b = 0.0
        self.order = [0.0] * self.num_assets  # signed shares of the order being worked (impact memory)

    def observation(self) -> list[float]:
        """The observation at bar ``t`` in the layout of :mod:`envs.observation`: cash fraction, time
        of day, then per asset its weight and features."""
        closes = self.market.close[self.t].tolist()
        feats = self.market.features[self.t].tolist()
        tradable = self.market.tradable[self.t].tolist()
        value = max(self.value, 1e-12)
        width = asset_width(self.market.num_features)  # one asset's block: weight, tradable, features
        obs = [0.0] * obs_dim(self.num_assets, self.market.num_features)
        obs[CASH] = self.cash / value
        obs[TIME_OF_DAY] = float(self.market.time_of_day[self.t])
        for a in range(self.num_assets):
            block = NUM_GLOBAL + a * width
            obs[block + WEIGHT] = self.shares[a] * closes[a] / value
            obs[block + TRADABLE] = 1.0 if tradable[a] else 0.0
            obs[block + FEATURES.start : block + width] = feats[a]
        return obs

    def _next_start(self) -> int:
        self.rng = (self.rng * _LCG_MUL + _LCG_INC) & _MASK64
        draw = (self.rng >> 33) & ((1 << 31) - 1)
        return draw % (start_high(self.num_steps, self.params) + 1)

    # --- the step ----------------------------------------------------------------------------
    def step(self, action: list[float]) -> tuple[list[float], float, bool, bool, dict]:
        """One decision: ``(obs, reward, terminated, truncated, info)`` with same-step autoreset."""
        p = self.params
        k = p.decision_interval
        slip = p.slippage_bps / 1e4
        # The broker's fees: a flat commission on both sides, or Alpaca's regulatory fees on sells.
        buy_rate = p.cost_rate if p.broker == "flat" else 0.0
        opens = self.market.open[self.t + 1].tolist()
        closes = self.market.close[self.t + k].tolist()
        n = self.num_assets
        # At the fill bar: tradable -> the order executes; not tradable but listed again later (a
        # forward-filled bar, before the first real bar) -> no order, the position stays; never
        # tradable again -> everything held is sold at the fill bar's open.
        tradable = self.market.tradable[self.t + 1].tolist()
        listed = self.market.listed[self.t + 1].tolist()

        buys, sells = self._orders(action, opens, tradable, listed)

        if p.execution:
            exit_ = [not tradable[a] and not listed[a] for a in range(n)]
            wanted = (buys, sells)
            cash, buys, sells, buy_notional, sell_notional, sell_fees = self._execute(
                buys, sells, opens, exit_
            )
            traded_notional = sell_notional + buy_notional
            cost = sell_fees + buy_rate * buy_notional
            if p.unfilled == "work" and p.max_participation > 0:
                cash, buys, sells, more_notional, more_cost = self._work(wanted, buys, sells, exit_, cash)
                traded_notional, cost = traded_notional + more_notional, cost + more_cost
            shares = [self.shares[a] - sells[a] + buys[a] for a in range(n)]
            return self._finish(cash, shares, closes, traded_notional, cost, buys, sells)

        # Sells first; their proceeds net of the sell fees fund the buys.
        proceeds = [sells[a] * opens[a] * (1 - slip) for a in range(n)]
        sell_notional = sum(proceeds)
        sell_fees = self._sell_fees(sells, proceeds, self.t + 1)
        cash = self.cash + sell_notional - sell_fees
        buy_notional = sum(buys[a] * opens[a] * (1 + slip) for a in range(n))
        needed = buy_notional * (1 + buy_rate)
        if needed > cash:
            fraction = cash / needed
            if p.action_mode == "shares":
                buys = [math.floor(b * fraction) for b in buys]
            else:
                buys = [b * fraction for b in buys]
            buy_notional = sum(buys[a] * opens[a] * (1 + slip) for a in range(n))
            needed = buy_notional * (1 + buy_rate)
        cash = max(0.0, cash - needed)
        shares = [self.shares[a] - sells[a] + buys[a] for a in range(n)]
        traded_notional = sell_notional + buy_notional
        cost = sell_fees + buy_rate * buy_notional
        return self._finish(cash, shares, closes, traded_notional, cost, buys, sells)

    def _orders(
        self, action: list[float], opens: list[float], tradable: list[bool], listed: list[bool]
    ) -> tuple[list[float], list[float]]:
        """The shares each asset's order buys and sells (both >= 0) before execution."""
        p = self.params
        n = self.num_assets
        buys = [0.0] * n
        sells = [0.0] * n
        if p.action_mode == "weights":
            # Negatives to 0, each weight capped at max_weight (the excess stays in cash), then rows
            # summing above 1 scaled to 1.
            weights = [
                min(max(0.0, float(a)), p.max_weight) if tradable[i] else 0.0 for i, a in enumerate(action)
            ]
            total = sum(weights)
            if total > 1.0:
                weights = [w / total for w in weights]
            value_open = self.cash + sum(self.shares[a] * opens[a] for a in range(n))
            for a in range(n):
                if not tradable[a] and listed[a]:
                    continue  # order skipped, position kept
                target = weights[a] * value_open / opens[a]
                if target > self.shares[a]:
                    buys[a] = target - self.shares[a]
                else:
                    sells[a] = self.shares[a] - target
        else:
            value_open = self.cash + sum(self.shares[a] * opens[a] for a in range(n))
            for a in range(n):
                delta = round(min(1.0, max(-1.0, float(action[a]))) * p.max_shares)
                if not tradable[a]:
                    if not listed[a]:
                        sells[a] = self.shares[a]
                    continue
                if delta > 0:
                    buys[a] = float(delta)
                    if p.max_weight < 1.0:  # post-trade holdings <= max_weight * value_open at the open
                        room = math.floor(p.max_weight * value_open / opens[a]) - self.shares[a]
                        buys[a] = min(buys[a], max(0.0, room))
                else:
                    sells[a] = min(float(-delta), self.shares[a])

        return buys, sells

    def _work(
        self,
        wanted: tuple[list[float], list[float]],
        buys: list[float],
        sells: list[float],
        exit_: list[bool],
        cash: float,
    ) -> tuple[float, list[float], list[float], float, float]:
        """``unfilled = "work"``: the part of the orders ``wanted`` that the volume cap cut keeps
        working on the bars after the fill bar, up to the mark bar, each bar's piece an order sent at
        the bar before it (its cap, liquidity and half-spread), on an untradable bar none; the worked
        order is not decayed between those bars. Returns ``(cash, buys, sells, notional, cost)``, the
        shares totals over all the bars."""
        p = self.params
        n = self.num_assets
        whole = p.action_mode == "shares"
        volume = self.market.expected_volume[self.t].tolist()
        limit = [math.floor(p.max_participation * v) if whole else p.max_participation * v for v in volume]
        left_b = [0.0 if exit_[a] else wanted[0][a] - min(wanted[0][a], limit[a]) for a in range(n)]
        left_s = [0.0 if exit_[a] else wanted[1][a] - min(wanted[1][a], limit[a]) for a in range(n)]
        buys, sells, notional, cost = list(buys), list(sells), 0.0, 0.0
        buy_rate = p.cost_rate if p.broker == "flat" else 0.0
        for bar in range(self.t + 2, self.t + p.decision_interval + 1):
            tradable = self.market.tradable[bar].tolist()
            b = [left_b[a] if tradable[a] else 0.0 for a in range(n)]
            s_ = [left_s[a] if tradable[a] else 0.0 for a in range(n)]
            opens = self.market.open[bar].tolist()
            cash, fb, fs, bn, sn, fees = self._execute(
                b, s_, opens, [False] * n, row=bar - 1, cash=cash, decay=False
            )
            cost += fees + buy_rate * bn
            notional += bn + sn
            for a in range(n):
                left_b[a], left_s[a] = left_b[a] - fb[a], left_s[a] - fs[a]
                buys[a], sells[a] = buys[a] + fb[a], sells[a] + fs[a]
        return cash, buys, sells, notional, cost

    def _execute(
        self,
        buys: list[float],
        sells: list[float],
        opens: list[float],
        exit_: list[bool],
        row: int | None = None,
        cash: float | None = None,
        decay: bool = True,
    ) -> tuple[float, list[float], list[float], float, float, float]:
        """The execution model (docs/env.md "Execution"), literally: volume cap, minimum order,
        half-spread and square-root impact, for orders sent at bar ``row`` (the decision bar) from
        ``cash`` (the env's); ``decay``: the worked order decays since the last decision. Returns
        ``(cash, buys, sells, buy_notional, sell_notional, sell_fees)``."""
        p = self.params
        n = self.num_assets
        row = self.t if row is None else row
        start_cash = self.cash if cash is None else cash
        # The fill bar's volume as expected at the decision bar (never the fill bar's own).
        volume = self.market.expected_volume[row].tolist()
        daily_vol = self.market.daily_vol[row].tolist()  # liquidity known at the decision bar
        adv = self.market.adv[row].tolist()
        whole = p.action_mode == "shares"
        # The half-spread of an order sent at the decision bar: the constant, or the bars' estimate
        # for this asset and time of day (known at the decision bar), at least the constant.
        if p.spread == "estimate":
            estimate = self.market.half_spread[row].tolist()
            half = [p.spread_scale * max(x, p.spread_bps / 1e4) for x in estimate]
        else:
            half = [p.spread_scale * p.spread_bps / 1e4] * n

        # The order worked so far, decayed since the last decision (EnvState.order).
        memory = ((1 - p.impact_decay) ** p.decision_interval if decay else 1.0) if p.impact_coef > 0 else 0.0
        remembered = [x * memory for x in self.order]

        def frac(a: int, q: float, side: int) -> float:
            # The square-root law on the whole order: this fill pays the growth of the order's
            # impact cost from m (same-direction shares already worked) to m + q, per share.
            m = max(0.0, side * remembered[a])
            impact = 0.0
            if adv[a] > 0 and q > 0:
                impact = daily_vol[a] * ((m + q) ** 1.5 - m**1.5) / q / math.sqrt(adv[a])
            return min(1.0, p.slippage_bps / 1e4 + half[a] + p.impact_coef * impact)

        buys, sells = list(buys), list(sells)
        for a in range(n):
            if p.max_participation > 0 and not exit_[a]:
                limit = p.max_participation * volume[a]
                if whole:
                    limit = math.floor(limit)
                buys[a], sells[a] = min(buys[a], limit), min(sells[a], limit)
            if sells[a] * opens[a] * (1 - frac(a, sells[a], -1)) < p.min_order_notional and not exit_[a]:
                sells[a] = 0.0
        proceeds = [sells[a] * opens[a] * (1 - frac(a, sells[a], -1)) for a in range(n)]
        sell_notional = sum(proceeds)
        sell_fees = self._sell_fees(sells, proceeds, row + 1)
        cash = start_cash + sell_notional - sell_fees
        buy_rate = p.cost_rate if p.broker == "flat" else 0.0
        # The scale is priced at the capped sizes; the scaled buys then pay their own (lower) price.
        needed = sum(buys[a] * opens[a] * (1 + frac(a, buys[a], 1)) for a in range(n)) * (1 + buy_rate)
        if needed > cash:
            fraction = cash / needed
            buys = [math.floor(b * fraction) if whole else b * fraction for b in buys]
        buys = [0.0 if b * opens[a] < p.min_order_notional else b for a, b in enumerate(buys)]
        buy_notional = sum(buys[a] * opens[a] * (1 + frac(a, buys[a], 1)) for a in range(n))
        cash = max(0.0, cash - buy_notional * (1 + buy_rate))
        for a in range(n):
            traded = buys[a] - sells[a]
            if traded > 0:
                self.order[a] = max(0.0, remembered[a]) + traded
            elif traded < 0:
                self.order[a] = min(0.0, remembered[a]) + traded
            else:
                self.order[a] = remembered[a]
        return cash, buys, sells, buy_notional, sell_notional, sell_fees

    def _sell_fees(self, sells: list[float], proceeds: list[float], bar: int) -> float:
        """The broker's fees on the sells filled at ``bar`` (``proceeds``: each asset's, in $): flat,
        the commission on the proceeds; Alpaca, the SEC fee on each asset's proceeds plus the FINRA
        TAF per share sold, capped per asset and fill, at the rates of the bar's session date, each
        rounded up to the cent with ``round_fees``."""
        p = self.params
        if p.broker == "flat":
            return p.cost_rate * sum(proceeds)
        day = session_dates(self.market.timestamps[bar : bar + 1])[0]
        sec, per_share, cap = rates_on_date(p, day.date())
        fees = 0.0
        for q, x in zip(sells, proceeds, strict=True):
            sec_fee, share_fee = sec * x, min(per_share * q, cap)
            if p.round_fees:
                sec_fee, share_fee = round_up_cent(sec_fee), round_up_cent(share_fee)
            fees += sec_fee + share_fee
        return fees

    def _finish(
        self,
        cash: float,
        shares: list[float],
        closes: list[float],
        traded_notional: float,
        cost: float,
        buys: list[float],
        sells: list[float],
    ) -> tuple[list[float], float, bool, bool, dict]:
        """Mark, reward, episode end and autoreset of a step whose fills are done."""
        p = self.params
        k = p.decision_interval
        n = self.num_assets
        # Mark to market at the close of t + k.
        value = cash + sum(shares[a] * closes[a] for a in range(n))
        ret = value / self.value - 1.0
        if p.reward == "log_return":
            reward = math.log(max(value / self.value, 1e-12))
        elif p.reward == "return":
            reward = ret
        else:
            a_prev, b_prev = self.sharpe_a, self.sharpe_b
            variance = max(b_prev - a_prev * a_prev, 1e-12)
            reward = (b_prev * (ret - a_prev) - 0.5 * a_prev * (ret * ret - b_prev)) / variance**1.5
            self.sharpe_a = a_prev + p.sharpe_eta * (ret - a_prev)
            self.sharpe_b = b_prev + p.sharpe_eta * (ret * ret - b_prev)
        peak = max(self.peak, value)
        if p.drawdown_penalty > 0:
            reward -= p.drawdown_penalty * (1.0 - value / peak)
        reward -= p.turnover_penalty * traded_notional / self.value
        reward *= p.reward_scale

        bar_t = self.t
        self.t += k
        self.cash, self.shares, self.value, self.peak = cash, shares, value, peak
        self.step_count += 1
        terminated = value < p.bust_frac * p.initial_cash
        truncated = not terminated and (
            self.step_count >= p.episode_len or self.t > last_decision_bar(self.num_steps, p)
        )
        final_obs = self.observation()
        info = {
            "cost": cost,
            "traded_notional": traded_notional,
            "value": value,
            "shares_traded": [buys[a] - sells[a] for a in range(n)],
            "bar_t": bar_t,
            "final_obs": final_obs,
        }
        restart = self._next_start()  # the generator advances every step, used only on reset
        if terminated or truncated:
            self._begin(restart)
            obs = self.observation()
        else:
            obs = final_obs
        info["t"] = self.t
        return obs, reward, terminated, truncated, info
