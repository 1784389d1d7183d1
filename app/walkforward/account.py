"""The walk-forward's out-of-sample account: the policies in charge, fold after fold, as one account.

:class:`StitchedAccount` keeps what the stitched run needs and nothing else: the loaded bars, the span's
features (each fold's test window normalized with the statistics of the policy in charge there, the
only features held for the whole span), each fold's universe (``data.fold_market.fold_universe``:
the tickers its test window trades, judged on its train window) and the policies in charge: a fold's
champion, or before any champion qualifies what ``[gate] before_champion`` says (the benchmark,
``backtests.stitched.BenchmarkInCharge``: buy-and-hold bought (as fast as the volume cap lets it) and held; or cash). :meth:`StitchedAccount.run` replays the
account from the span's first bar to the last fold added (``backtests.stitched.run_stitched``: one
engine run, so the account and the baselines stay continuous); :meth:`StitchedAccount.report` writes its
report (``app.walkforward.judging.write_account_report``) with the walk-forward's keys: each fold's
row and which champion traded which sessions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from agents.ensemble import load_policy
from app.champion import Champion
from app.config import Config
from app.evaluation import check_policy_fits, policy_digest
from app.runs import RunDir
from app.walkforward.judging import write_account_report
from app.walkforward.record import NO_CHAMPION_LABELS, FoldRecord
from backtests.engine import BacktestResult
from backtests.metrics_model import ChampionSpan, MetricsDocument, WalkForwardSummary
from backtests.stitched import BenchmarkInCharge, run_stitched, run_stitched_capacity
from data.features import DEFAULT_WINDOWS, feature_names, normalize
from data.fold_market import fold_universe, raw_features
from data.market import MarketData
from envs.trading import EnvParams


class StitchedAccount:
    """The stitched out-of-sample account of a walk-forward (see the module docstring)."""

    def __init__(
        self,
        full: MarketData,
        plans: Sequence[Any],
        params: EnvParams,
        device: torch.device,
        min_coverage: float | None = None,
        before_champion: str = "benchmark",
        feed: str | None = None,
    ) -> None:
        """``min_coverage``: each fold's test window trades only its fold's universe (None: every
        ticker, as loaded). ``before_champion``: what a fold with no champion in charge holds,
        ``"benchmark"`` or ``"cash"``. ``feed``: the bars' data feed (``MarketSplits.feed``), for the
        reports."""
        if before_champion not in NO_CHAMPION_LABELS:
            raise ValueError(f"before_champion must be one of {', '.join(NO_CHAMPION_LABELS)}")
        self.full, self.params, self.device = full, params, device
        self.min_coverage = min_coverage
        self.before_champion = before_champion
        self.feed = feed
        self.num_folds = len(plans)
        self.span_start = plans[0].bars["test"][0]
        self.windows = dict((full.feature_spec or {}).get("windows") or DEFAULT_WINDOWS)
        self.names = feature_names(self.windows)
        span_bars = plans[-1].bars["test"][1] - self.span_start
        # (span bars, A, F) float32: the only features held for the whole span.
        self.features = torch.zeros(span_bars, full.num_assets, len(self.names), device=full.device)
        # (span bars, A) bool: the loaded masks with each fold's tickers outside its universe off.
        self.tradable = full.tradable[self.span_start : self.span_start + span_bars].clone()
        self.listed = full.listed[self.span_start : self.span_start + span_bars].clone()
        self.stop = self.span_start
        self.policies: list[Any] = []
        self.switch_bars: list[int] = []
        self.labels: list[str] = []
        self._loaded: dict[str, Any] = {}
        self._benchmark = BenchmarkInCharge(full.num_assets, len(self.names))

    def add(self, plan: Any, in_charge: Champion | None, holding: str | None = None) -> None:
        """The fold ``plan``'s test window, traded by ``in_charge`` (its fold's champion) on features
        normalized with its own statistics; None: no champion, the account holds ``holding``
        (``"benchmark"`` or ``"cash"``; default: ``before_champion``)."""
        start, stop = plan.bars["test"]
        if start != self.stop:
            raise ValueError(f"fold {plan.fold.index}: test windows must be added in order")
        rows = slice(start - self.span_start, stop - self.span_start)
        if self.min_coverage is not None:
            universe = fold_universe(self.full, plan.bars["train"], self.min_coverage)
            self.tradable[rows] &= universe
            self.listed[rows] &= universe
        if in_charge is None:
            holding = holding or self.before_champion
            policy = self._benchmark if holding == "benchmark" else self._cash
            label = NO_CHAMPION_LABELS[holding]
        else:
            spec = in_charge.feature_spec or {}
            self.features[rows] = normalize(raw_features(self.full, start, stop, spec["windows"]), spec)
            policy, label = self._policy(in_charge.policy_dir), in_charge.run_id
        self.policies.append(policy)
        self.switch_bars.append(start - self.span_start)
        self.labels.append(label)
        self.stop = stop

    def _policy(self, policy_dir: str) -> Any:
        if policy_dir not in self._loaded:
            self._loaded[policy_dir] = load_policy(policy_dir, device=self.device)
        return self._loaded[policy_dir]

    def _cash(self, obs: Tensor) -> Tensor:
        return torch.zeros(obs.shape[0], self.full.num_assets, device=obs.device)

    def market(self) -> MarketData:
        """The span so far: the loaded bars, each fold's features as its policy in charge sees them."""
        window = self.full.slice(self.span_start, self.stop)
        return MarketData(
            **{
                name: getattr(window, name)
                for name in ("tickers", "timestamps", "open", "high", "low", "close", "volume", "session_id")
            },
            time_of_day=window.time_of_day,
            interval=window.interval,
            features=self.features[: self.stop - self.span_start],
            feature_names=self.names,
            tradable=self.tradable[: self.stop - self.span_start],
            listed=self.listed[: self.stop - self.span_start],
            daily_vol=window.daily_vol,
            adv=window.adv,
            expected_volume=window.expected_volume,
            half_spread=window.half_spread,
        )

    def run(self) -> BacktestResult:
        """The account and the baselines from the span's first bar to the last fold added."""
        market = self.market()
        for policy in self.policies:
            # (bound methods: equal, never identical)
            if policy is not self._benchmark and policy != self._cash:
                check_policy_fits(policy, market, self.params)
        return run_stitched(market, self.params, self.policies, self.switch_bars, device=self.device)

    def capacity(self) -> BacktestResult:
        """The account and the baselines at every account size of ``backtests.capacity``, one pass."""
        market = self.market()
        return run_stitched_capacity(market, self.params, self.policies, self.switch_bars, device=self.device)

    def report(
        self,
        run: RunDir,
        config: Config,
        records: Sequence[Mapping[str, Any]],
        *,
        result: BacktestResult | None = None,
        tearsheet: bool = False,
        home: Path | None = None,
        final: bool = False,
    ) -> MetricsDocument:
        """The report of ``result`` (default: a fresh :meth:`run`) for the folds ``records``, ``final``
        once the last fold is done; with ``home`` its look (the policies in charge, keyed by their
        weights) is counted in the home's ledger (``app.walkforward.judging.write_account_report``)."""
        result = result if result is not None else self.run()
        return write_account_report(
            run,
            result,
            config=config,
            home=home,
            final=final,
            planned_folds=self.num_folds,
            policy=policy_digest(*self._loaded),
            tearsheet=tearsheet,
            walkforward=walkforward_fields(records, config),
            # The capacity curve once, on the final report (a replay at five sizes per fold would
            # double every provisional report's time).
            capacity=self.capacity() if final else None,
            data_feed=self.feed,
        )


def walkforward_fields(records: Sequence[FoldRecord], config: Config) -> WalkForwardSummary:
    """metrics.json ``walkforward``: the settings, one row per fold and the champions' spans."""
    rows = [
        {
            "index": r.index,
            "windows": r.windows,
            "pods_tried": r.pods_tried,
            "challenger": r.challenger.pod_id if r.challenger is not None else None,
            "gate_sharpe": r.gate.challenger.sharpe_ratio,
            "incumbent_gate_sharpe": r.gate.incumbent.sharpe_ratio if r.gate.incumbent is not None else None,
            "promoted": r.promoted,
            "gate_reason": r.gate.reason,
            "in_charge": r.in_charge_label(),
            "test": r.test.model_dump(),
        }
        for r in records
    ]
    return WalkForwardSummary(
        # The [walkforward] settings, and the promotion rule's that shape the account ([gate]).
        settings={
            **config.walkforward.model_dump(mode="json"),
            "gate": config.gate.rule,
            "before_champion": config.gate.before_champion,
        },
        num_folds=len(records),
        folds=rows,
        champions=champion_spans(records),
    )


def champion_spans(records: Sequence[FoldRecord]) -> list[ChampionSpan]:
    """Which champion traded which sessions: consecutive folds with the same policy in charge merged,
    each with its first and last session, sessions and folds."""
    spans: list[ChampionSpan] = []
    for r in records:
        name, (first, last) = r.in_charge_label(), r.test_window()
        if spans and spans[-1].champion == name:
            prev = spans[-1]
            spans[-1] = prev.model_copy(
                update={
                    "last": last,
                    "sessions": prev.sessions + r.test.sessions,
                    "folds": [*prev.folds, r.index],
                }
            )
        else:
            spans.append(
                ChampionSpan(champion=name, first=first, last=last, sessions=r.test.sessions, folds=[r.index])
            )
    return spans
