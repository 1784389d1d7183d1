"""Build podracer homes for the dashboard tests from synthetic data.

``write_backtest`` writes ``<run>/backtest/`` in the schema of ARCHITECTURE.md (backtests/): a
random-walk minute-bar market, a champion that follows a noisy momentum rule, buy-and-hold and
cash, their equity, weights, trades (with costs) and daily returns, and a metrics.json computed
from those daily returns. Also usable by hand:
``python tests/dashboard_fixture.py HOME [--days 252]`` then ``podracer dashboard --home HOME``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from backtests import oos_test, snooping
from backtests.metrics import TRADING_DAYS_PER_YEAR
from backtests.metrics_model import MetricsDocument
from backtests.verdict import ANNUALIZED_MIN_SESSIONS, judge, verdict_fields
from data.atomic import atomic_path, atomic_write_json

BARS_PER_DAY = 390
ANNUALIZATION = 252


def session_minutes(
    days: int, start: str = "2024-01-02", bars_per_day: int = BARS_PER_DAY
) -> pd.DatetimeIndex:
    """Minute bar starts (UTC) of ``days`` weekdays, 14:30 onwards (a fixed-offset stand-in for NYSE)."""
    dates = pd.bdate_range(start, periods=days)
    offsets = pd.to_timedelta(np.arange(bars_per_day), unit="min") + pd.Timedelta(hours=14, minutes=30)
    stamps = (dates.values[:, None] + offsets.values[None, :]).ravel()
    return pd.DatetimeIndex(stamps).tz_localize("UTC")


def _metrics_from_daily(
    daily: np.ndarray, costs: float, turnover: float, exposure: float, annualize: bool = True
) -> dict:
    """empyrical-style metrics of daily simple returns (enough to exercise the dashboard).

    ``annualize=False`` writes annual_return and calmar_ratio as null, as the backtest does for
    windows under 63 sessions.
    """
    n = len(daily)
    cum = float(np.prod(1 + daily) - 1)
    ann = float((1 + cum) ** (ANNUALIZATION / n) - 1) if n and annualize else None
    vol = float(np.std(daily, ddof=1) * math.sqrt(ANNUALIZATION)) if n > 1 else None
    mean, sd = float(np.mean(daily)), float(np.std(daily, ddof=1)) if n > 1 else 0.0
    sharpe = mean / sd * math.sqrt(ANNUALIZATION) if sd > 0 else None
    downside = np.sqrt(np.mean(np.minimum(daily, 0) ** 2))
    sortino = mean / downside * math.sqrt(ANNUALIZATION) if downside > 0 else None
    wealth = np.cumprod(1 + daily)
    mdd = float(np.min(wealth / np.maximum.accumulate(wealth) - 1)) if n else None
    calmar = ann / abs(mdd) if ann is not None and mdd else None
    return {
        "cum_returns_final": cum,
        "annual_return": ann,
        "annual_volatility": vol,
        "sharpe_ratio": sharpe,
        "sortino_ratio": sortino,
        "max_drawdown": mdd,
        "calmar_ratio": calmar,
        "turnover": turnover,
        "costs_paid": costs,
        "exposure": exposure,
        "hit_rate": float(np.mean(daily > 0)) if n else None,
        "probabilistic_sharpe_ratio": 0.81 if sharpe is not None else None,
    }


def write_backtest(
    run_dir: Path,
    *,
    days: int = 30,
    num_assets: int = 4,
    decision_interval: int = 15,
    seed: int = 0,
    initial_cash: float = 1e6,
    cost_rate: float = 0.0005,
    schema: str = "new",
    absurd: bool = False,
) -> dict:
    """Write ``<run_dir>/backtest/*`` and return the metrics.json content.

    ``schema="new"`` writes the keys of the champion-trust change (pbo, pbo_logits, num_sessions,
    annualized_min_sessions, cost_rate, slippage_bps, an equal_weight strategy, annual figures null
    under 63 sessions, the stated verdict); ``"old"`` writes a run from before it. ``absurd=True`` puts the default
    demo's old figures on the champion (annual return 3,525,288%, Calmar 7.7 million).
    """
    rng = np.random.default_rng(seed)
    stamps = session_minutes(days)
    tickers = [f"T{i:02d}" for i in range(num_assets)]
    log_ret = rng.normal(0.0, 0.0008, size=(len(stamps), num_assets)) + 2e-6
    prices = 100.0 * np.exp(np.cumsum(log_ret, axis=0))
    bar_ret = np.vstack([np.zeros((1, num_assets)), prices[1:] / prices[:-1] - 1])

    # Weights are decided every `decision_interval` bars and held in between.
    decisions = np.arange(0, len(stamps), decision_interval)
    champ_w = np.zeros((len(stamps), num_assets))
    trades = []
    held = np.zeros(num_assets)
    value = initial_cash
    champ_equity = np.empty(len(stamps))
    for i in range(len(stamps)):
        value *= 1 + float(held @ bar_ret[i])
        if i % decision_interval == 0:
            score = np.sum(log_ret[max(0, i - 60) : i + 1], axis=0) + rng.normal(0, 0.002, num_assets)
            target = np.clip(score, 0, None)
            target = target / target.sum() * 0.9 if target.sum() > 0 else np.zeros(num_assets)
            # Move a little toward the target each decision: a slow rule that does not churn.
            target = held + 0.05 * (target - held)
            notional = (target - held) * value
            cost = np.abs(notional) * cost_rate
            value -= float(cost.sum())
            for a in np.flatnonzero(np.abs(notional) > 1e-9):
                trades.append((stamps[i], "champion", tickers[a], float(notional[a]), float(cost[a])))
            held = target
        champ_w[i] = held
        champ_equity[i] = value
    bh_w = np.full(num_assets, 1.0 / num_assets)
    bh_equity = initial_cash * (1 - cost_rate) * (prices / prices[0]) @ bh_w
    for a in range(num_assets):
        trades.append(
            (
                stamps[0],
                "buy_and_hold",
                tickers[a],
                initial_cash * bh_w[a],
                initial_cash * bh_w[a] * cost_rate,
            )
        )
    strategies = ["champion", "buy_and_hold", "cash"]
    equity = pd.DataFrame(
        {"timestamp": stamps, "champion": champ_equity, "buy_and_hold": bh_equity, "cash": initial_cash}
    )
    if schema == "new":
        # Equal weight, rebalanced every bar (close enough to every session for a fixture).
        equity["equal_weight"] = initial_cash * (1 - cost_rate) * np.cumprod(1 + bar_ret.mean(axis=1))
        strategies.append("equal_weight")

    out = Path(run_dir) / "backtest"
    out.mkdir(parents=True, exist_ok=True)
    _write_parquet(out / "equity.parquet", equity)

    rows = decisions
    bh_weights = (prices[rows] * bh_w) / ((prices[rows] * bh_w).sum(axis=1, keepdims=True))
    long = [
        pd.DataFrame(
            {
                "timestamp": np.repeat(stamps[rows], num_assets),
                "strategy": name,
                "ticker": np.tile(tickers, len(rows)),
                "weight": w.ravel(),
            }
        )
        for name, w in (
            ("champion", champ_w[rows]),
            ("buy_and_hold", bh_weights),
            ("cash", np.zeros_like(bh_weights)),
        )
    ]
    _write_parquet(out / "positions.parquet", pd.concat(long, ignore_index=True))
    _write_parquet(
        out / "trades.parquet",
        pd.DataFrame(trades, columns=["timestamp", "strategy", "ticker", "notional", "cost"]),
    )

    by_day = equity.set_index("timestamp").groupby(equity["timestamp"].dt.date.values).last()
    start_value = pd.DataFrame([[initial_cash] * len(strategies)], columns=by_day.columns)
    daily = pd.concat([start_value, by_day]).pct_change().iloc[1:]
    daily.index = pd.to_datetime(by_day.index)
    daily_frame = daily.rename_axis("date").reset_index()
    _write_parquet(out / "daily_returns.parquet", daily_frame)

    # costs_paid is a fraction of the initial value, as backtests.metrics.costs_paid defines it.
    costs = {
        name: sum(t[4] for t in trades if t[1] == name) / initial_cash
        for name in ("champion", "buy_and_hold", "cash")
    }
    annualize = schema == "old" or len(daily) >= ANNUALIZED_MIN_SESSIONS
    metrics = {
        "window": "test",
        "start": str(daily.index[0].date()),
        "end": str(daily.index[-1].date()),
        "annualization": ANNUALIZATION,
        "period": "daily",
        "benchmark": "buy_and_hold",
        "num_trials": 7,
        "strategies": {
            "champion": _metrics_from_daily(
                daily["champion"].to_numpy(), costs["champion"], 12.5, 0.9, annualize
            ),
            "buy_and_hold": _metrics_from_daily(
                daily["buy_and_hold"].to_numpy(), costs["buy_and_hold"], 1.0, 1.0, annualize
            ),
            "cash": _metrics_from_daily(daily["cash"].to_numpy(), 0.0, 0.0, 0.0, annualize),
        },
    }
    if schema == "new":
        logits = np.random.default_rng(seed + 1).normal(-0.3, 1.2, size=70)
        metrics.update(
            {
                "pbo": float(np.mean(logits <= 0)),
                "pbo_logits": [float(v) for v in logits],
                "pbo_num_splits": len(logits),
                "num_sessions": len(daily),
                "annualized_min_sessions": ANNUALIZED_MIN_SESSIONS,
                "cost_rate": cost_rate,
                "slippage_bps": 1.0,
            }
        )
        metrics["strategies"]["equal_weight"] = _metrics_from_daily(
            daily["equal_weight"].to_numpy(), cost_rate * len(daily), 1.0, 1.0, annualize
        )
        # The out-of-sample test and the selection diagnostics as backtests.report computes them.
        metrics["significance_level"] = 0.05
        metrics["oos_test"] = {
            **oos_test.out_of_sample_test(
                daily["champion"].to_numpy(),
                {"buy_and_hold": daily["buy_and_hold"].to_numpy()},
                strategy="champion",
                benchmark="buy_and_hold",
                min_replications=199,
            ),
            "held_out": True,
        }
        trials = np.random.default_rng(seed + 2).normal(0.0, 0.01, size=(20, 7))
        bench = np.random.default_rng(seed + 3).normal(0.0, 0.01, size=20)
        metrics["selection"] = snooping.selection_diagnostics(
            snooping.SelectionInputs(trials, champion=0, benchmark=bench)
        )
    if absurd:
        # The default demo's figures before the trust change: a 12-session window annualized.
        metrics["strategies"]["champion"].update(
            annual_return=35252.88, calmar_ratio=7726312.5, sortino_ratio=512.83, sharpe_ratio=21.7
        )
        metrics["strategies"]["buy_and_hold"].update(annual_return=-0.804, calmar_ratio=-8.26)
    if schema == "new":  # the verdict as backtests.report states it
        metrics.update(verdict_fields(judge(MetricsDocument.parse(metrics), "champion")))
    atomic_write_json(out / "metrics.json", metrics)
    return json.loads((out / "metrics.json").read_text())


def write_real_backtest(
    run_dir: Path,
    *,
    days: int = 30,
    num_assets: int = 4,
    decision_interval: int = 15,
    seed: int = 0,
    tearsheet: bool = False,
) -> dict:
    """``<run_dir>/backtest/*`` from the real stages: a toy market, ``backtests.engine`` and
    ``backtests.report.write_report``."""
    import torch

    from backtests.capacity import run_capacity
    from backtests.engine import run_backtest
    from backtests.report import write_report
    from data.toy import toy_market
    from envs.observation import split_obs
    from envs.trading import EnvParams

    num_features = 2
    market = toy_market(
        num_steps=days * BARS_PER_DAY, num_assets=num_assets, num_features=num_features, seed=seed
    )

    def champion(obs: torch.Tensor) -> torch.Tensor:
        # At each session's first decision: equal weight tilted by the first feature; otherwise keep
        # the current weights (no trade), so costs stay a daily rebalance's worth.
        glob, per_asset = split_obs(obs, num_assets, num_features)
        tilt = 1.0 + 0.5 * torch.tanh(per_asset[..., 2])  # the first feature (envs.observation.FEATURES)
        target = 0.95 * tilt / tilt.sum(dim=1, keepdim=True)
        session_start = (glob[:, 1] < decision_interval / BARS_PER_DAY).unsqueeze(1)
        return torch.where(session_start, target, per_asset[..., 0])

    params = EnvParams(decision_interval=decision_interval, broker="flat", cost_rate=0.0005)
    result = run_backtest(market, params, {"champion": champion}, device="cpu", seed=seed)
    sizes = run_capacity(market, params, {"champion": champion}, device="cpu", seed=seed)
    write_report(
        run_dir,
        result,
        num_trials=7,
        tearsheet=tearsheet,
        capacity=sizes,
        max_participation=params.max_participation,
        annualization=TRADING_DAYS_PER_YEAR,
    )
    return json.loads((Path(run_dir) / "backtest" / "metrics.json").read_text())


def write_curves(run_dir: Path, pods: list[str], points: int = 50, seed: int = 0) -> None:
    """``<run>/pods/<pod>/curve.parquet`` with CleanRL-style metric keys."""
    rng = np.random.default_rng(seed)
    for k, pod in enumerate(pods):
        steps = np.arange(1, points + 1) * 4096
        ret = np.cumsum(rng.normal(0.02 * (k + 1), 0.1, points))
        frame = pd.DataFrame(
            {
                "env_steps": steps,
                "charts/episodic_return": ret,
                "losses/value_loss": np.abs(rng.normal(1.0, 0.2, points)) / np.sqrt(np.arange(1, points + 1)),
                "eval/score": ret / 10,
            }
        )
        _write_parquet(Path(run_dir) / "pods" / pod / "curve.parquet", frame)


def write_tournament(run_dir: Path, pods: int, *, board_size: int = 10, population: int = 4, seed: int = 0):
    """``<run>/leaderboard.sqlite`` through the real ``Leaderboard`` writer: ``pods`` PPO pods, the
    first ``population`` fresh, each later one copied from a leaderboard pod with one or two
    hyper-parameters perturbed (as the tournament's exploit/explore step does). Returns the pod ids
    best first (the board)."""
    from agents.tournament.leaderboard import Leaderboard

    rng = np.random.default_rng(seed)
    hparams: dict[str, dict] = {}
    scores: dict[str, float] = {}
    with Leaderboard(run_dir, size=board_size) as board:
        for seq in range(pods):
            pod = f"p{seq:04d}"
            if seq < population or not board.entries():
                parent, generation = None, 0
                params = {
                    "clip_coef": float(rng.uniform(0.1, 0.3)),
                    "ent_coef": float(10 ** rng.uniform(-3, -2)),
                    "gae_lambda": float(rng.uniform(0.8, 0.99)),
                    "gamma": float(rng.uniform(0.8, 0.999)),
                    "learning_rate": float(10 ** rng.uniform(-4, -2)),
                    "update_epochs": int(rng.integers(2, 6)),
                }
            else:
                entries = board.entries()
                source = entries[int(rng.integers(0, min(3, len(entries))))]
                parent, generation = source["pod_id"], source["generation"] + 1
                params = dict(hparams[parent])
                for key in rng.choice(sorted(params), size=int(rng.integers(1, 3)), replace=False):
                    if key == "update_epochs":
                        params[key] = max(1, int(params[key]) + int(rng.choice([-1, 1])))
                    else:  # perturb by 0.8 or 1.2, discount factors kept below 1
                        value = float(params[key]) * float(rng.choice([0.8, 1.2]))
                        params[key] = min(value, 0.999) if key in ("gamma", "gae_lambda") else value
            hparams[pod] = params
            board.start_pod(
                pod, seq=seq, parent_id=parent, generation=generation, algo="ppo", hparams=params,
                seed=seq, checkpoint=f"pods/{pod}",
            )  # fmt: skip
            if seq % 17 == 16:
                board.record_failure(pod, "NaN in the policy loss")
                continue
            base = scores.get(parent, rng.normal(-2.0, 2.0)) if parent else rng.normal(-2.0, 2.0)
            score = float(base + rng.normal(0.3, 1.0))
            scores[pod] = score
            metrics = {
                "sharpe_ratio": score,
                "sortino_ratio": score * 1.4,
                "max_drawdown": -float(rng.uniform(0.01, 0.3)),
                "calmar_ratio": None,
                "annual_return": None,
                "cum_returns_final": float(rng.normal(0.0, 0.05)),
                "annual_volatility": float(rng.uniform(0.1, 0.4)),
                "costs_paid": float(rng.uniform(0.01, 0.15)),
                "turnover": float(rng.uniform(0.5, 10)),
                "exposure": float(rng.uniform(0.8, 1.0)),
                "hit_rate": float(rng.uniform(0.3, 0.7)),
                "num_days": 12.0,
            }
            board.record_score(
                pod, score=score, metrics=metrics, round_steps=4096, env_steps=4096 * (generation + 1)
            )
        return [e["pod_id"] for e in board.entries()]


def write_home_stores(home: Path, run: str, run_dir: Path) -> None:
    """A nightly registry (one promotion of ``run``, one rejection) and a paper journal (a decision,
    an order, its fill, a position, an event, a P&L row), through the stages' real writers."""
    from app.nightly.registry import Champion, DecisionRecord, record_decision
    from app.paper.journal import Journal

    common = dict(started_at="2024-03-01T07:00:00+00:00", step="decide", fitness="sharpe")
    # The champion's export (just its manifest's id): the paper decisions below trade it ("b1"), so
    # the Nightly page has an out-of-sample record since the promotion.
    bundle = home / "exports" / f"{run}-champion"
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "manifest.json").write_text('{"bundle_id": "b1"}')
    record_decision(
        home,
        DecisionRecord(
            decided_at="2024-03-01T07:10:00+00:00",
            verdict="promoted",
            reason="first champion",
            challenger_run_id=run,
            challenger_fitness=1.1,
            **common,
        ),
        Champion(
            run_id=run,
            policy_dir=str(run_dir / "champion"),
            promoted_at="2024-03-01T07:10:00+00:00",
            fitness="sharpe",
            fitness_value=1.1,
            bundle=str(bundle),
        ),
    )
    record_decision(
        home,
        DecisionRecord(
            decided_at="2024-03-02T07:10:00+00:00",
            verdict="rejected",
            reason="below margin",
            challenger_run_id="run-b",
            challenger_fitness=0.9,
            champion_fitness=1.1,
            champion_run_id=run,
            **common,
        ),
    )
    with Journal.for_home(home) as journal:
        journal.decision(
            decision_ts="2024-03-04T15:00:00+00:00",
            bundle_id="b1",
            dry_run=False,
            equity=100_000.0,
            cash=50_000.0,
            tickers=["AAPL"],
            current_weights=[0.0],
            target_weights=[0.5],
            policy_weights=[0.5],
            skipped=[],
            session="2024-03-04",
            account_equity=100_000.0,
            holdings={},
            prices=[180.0],
        )
        journal.start_session(
            "2024-03-04", bundle_id="b1", bundle_path=str(bundle), run_id=run, source="champion"
        )
        journal.order(
            client_order_id="pr-1",
            decision_ts="2024-03-04T15:00:00+00:00",
            bundle_id="b1",
            ticker="AAPL",
            side="buy",
            qty=10.0,
            est_price=180.0,
            status="filled",
        )
        journal.fill(
            client_order_id="pr-1",
            ticker="AAPL",
            side="buy",
            filled_qty=10.0,
            filled_avg_price=180.1,
            status="filled",
        )
        journal.position(
            decision_ts="2024-03-04T15:00:00+00:00",
            ticker="AAPL",
            qty=10.0,
            market_value=2051.0,
            expected_qty=10.0,
            bundle_id="b1",
        )
        journal.event("reconcile", "positions match")
        journal.pnl(
            decision_ts="2024-03-04T15:00:00+00:00",
            equity=100_250.0,
            cash=98_199.0,
            last_equity=100_000.0,
            bundle_id="b1",
            holdings={"AAPL": (10.0, 205.1)},
        )
    write_sim_record(home)


def write_sim_record(home: Path, sessions: int = 21, seed: int = 0) -> None:
    """A paper-vs-simulator record (``app.paper.sim_record``) of ``sessions`` sessions from 2024-03-04,
    two orders a session: the broker pays about 4 bp over the next open, the model about 2.6 bp; the
    simulated P&L is the paper P&L less a small execution gap."""
    from app.paper.sim_record import DayCheck, OrderCheck, SimRecord, record_path
    from data.calendar import sessions_in_range

    rng = np.random.default_rng(seed)
    days = [d.strftime("%Y-%m-%d") for d in sessions_in_range("2024-03-04", "2024-05-31")[:sessions]]
    orders, rows, equity = [], [], 100_000.0
    for day in days:
        for side, sign in (("sell", -1.0), ("buy", 1.0)):
            fill_open = 180.0 + rng.normal(0, 2)
            orders.append(
                OrderCheck(
                    session=day, decision_ts=f"{day}T15:00:00+00:00", client_order_id=f"pr-{day}-{side}",
                    ticker="AAPL", side=side, qty=20.0, filled_qty=15.0,
                    fill_price=fill_open * (1 + sign * (4.0 + rng.normal(0, 0.8)) * 1e-4), fill_open=fill_open,
                    cap=500.0, model_qty=20.0, model_price=fill_open * (1 + sign * (2.6 + rng.normal(0, 0.4)) * 1e-4),
                    fee_model=0.09 if side == "sell" else 0.0,
                )
            )  # fmt: skip
        paper = float(rng.normal(60, 450))
        rows.append(
            DayCheck(
                session=day, bundle_id="b1", orders=2, start_equity=equity, paper_pnl=paper,
                sim_pnl=paper + float(rng.normal(12, 6)), fees_charged=0.09, fees_model=0.09, fees_sim=0.1,
            )
        )  # fmt: skip
        equity += paper
    record = SimRecord(written_at=f"{days[-1]}T21:30:00+00:00", bound_bps=10.0, orders=orders, days=rows)
    record.write(record_path(home))


def make_run(
    home: Path,
    run: str = "run-1",
    *,
    days: int = 30,
    backtest: bool = True,
    real: bool = False,
    tournament_pods: int = 0,
    **kwargs,
) -> Path:
    """A run directory with a backtest and two pods' curves; returns the run dir.

    ``real=True`` writes the backtest with the real engine and report writer, otherwise with the
    hand-built writer above (which can shape edge cases the engine would not produce).
    ``tournament_pods=N`` also writes a leaderboard of N pods (``write_tournament``) and names the
    best one champion in the run record.
    """
    run_dir = Path(home) / "runs" / run
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {"run_id": run, "pods_tried": 7, "trial_sharpes": [0.1, 0.5, 1.2]}
    if tournament_pods:
        leaders = write_tournament(run_dir, tournament_pods)
        record.update(pods_tried=tournament_pods, champion={"pod_id": leaders[0]})
    atomic_write_json(run_dir / "run.json", record)
    write_curves(run_dir, ["pod-000", "pod-001"])
    if backtest:
        (write_real_backtest if real else write_backtest)(run_dir, days=days, **kwargs)
    return run_dir


def make_walkforward_run(home: Path, run: str = "wf", *, days: int = 30, folds: int = 3) -> Path:
    """A walk-forward run: the real backtest of a toy market as its stitched account (``make_run``),
    its record (``kind = "walkforward"``) and ``folds`` fold records splitting the account's sessions,
    the second fold's challenger kept, the others promoted; metrics.json with its ``walkforward`` keys."""
    from app.config import Config
    from app.runs import RunDir
    from app.walkforward.account import walkforward_fields
    from app.walkforward.record import FoldRecord

    run_dir = make_run(home, run, days=days, real=True)
    wf = RunDir.at(run_dir)
    metrics = json.loads(wf.backtest_metrics.read_text())
    daily = pd.read_parquet(wf.backtest_daily_returns)
    dates = [str(d) for d in daily["date"]]
    step = len(dates) // folds
    records = []
    for k in range(folds):
        test = dates[k * step : len(dates) if k == folds - 1 else (k + 1) * step]
        promoted = k != 1
        in_charge = {"fold": k, "run": f"fold-{k:03d}"} if promoted else records[-1]["in_charge"]
        returns = daily["champion"].iloc[k * step : k * step + len(test)]
        records.append(
            {
                "index": k,
                "windows": {
                    "train": ["2023-10-02", "2023-11-30"],
                    "valid": ["2023-12-01", "2023-12-28"],
                    "embargo": ["2023-12-29", "2023-12-29"],
                    "test": [test[0], test[-1]],
                },  # fmt: skip
                "pods_tried": 12 + k,
                "promoted": promoted,
                "in_charge": in_charge,
                "gate": {
                    "challenger": {"sharpe_ratio": 1.5 - 0.4 * k},
                    "incumbent": {"sharpe_ratio": 0.9} if k else None,
                    "reason": "challenger sharpe beats champion" if promoted else "does not beat the margin",
                    "window": ["2023-12-01", "2023-12-28"],
                },
                "test": {
                    "sessions": len(test),
                    "return": float(np.prod(1 + returns.to_numpy()) - 1),
                    "buy_and_hold_return": 0.01 * (k - 1),
                    "sharpe_ratio": 1.0 + k,
                    "costs_paid": 120.0 * (k + 1),
                },
                "seconds": {"total": 60.0 + k},
            }
        )
        wf.write_fold_record(k, FoldRecord.parse(records[-1]))
    wf.write(
        {
            "run_id": run,
            "kind": "walkforward",
            "status": "done",
            "walkforward": {"settings": Config().walkforward.model_dump(mode="json"), "folds": records},
        }
    )
    atomic_write_json(
        wf.backtest_metrics,
        {
            **metrics,
            "window": "walkforward",
            "walkforward": walkforward_fields([FoldRecord.parse(r) for r in records], Config()).model_dump(),
        },
    )
    return run_dir


def _write_parquet(path: Path, frame: pd.DataFrame) -> None:
    with atomic_path(path, suffix=".parquet") as tmp:
        frame.to_parquet(tmp, index=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("home", type=Path)
    parser.add_argument("--run", default="demo-run")
    parser.add_argument("--days", type=int, default=252)
    parser.add_argument("--real", action="store_true", help="use backtests.engine + backtests.report")
    parser.add_argument("--pods", type=int, default=0, help="also write a tournament of this many pods")
    parser.add_argument("--old", action="store_true", help="a metrics.json from before pbo/num_sessions")
    parser.add_argument("--absurd", action="store_true", help="the default demo's old absurd figures")
    args = parser.parse_args()
    extra = {} if args.real else {"schema": "old" if args.old else "new", "absurd": args.absurd}
    print(make_run(args.home, args.run, days=args.days, real=args.real, tournament_pods=args.pods, **extra))
