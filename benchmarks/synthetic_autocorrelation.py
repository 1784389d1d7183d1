"""The daily lag-1 autocorrelation the synthetic market's planted signal induces, per signal level.

The planted signal (``data.synthetic``) is an AR process on the idiosyncratic bar returns,
``i[t] = (phi / L) * (i[t-1] + ... + i[t-L]) + eps[t]`` with ``phi = PHI_PER_SIGNAL * signal`` and
``L = MOMENTUM_LOOKBACK`` bars. Real cross-sectional anomalies show a daily lag-1 autocorrelation of a
few hundredths; this says where each signal level sits. For each level the process runs through the
generator's own ``_planted_momentum`` on i.i.d. normal shocks (the intraday volatility pattern and the
regimes scale the shocks, which barely moves a correlation), is summed per session of 390 bars, and
the lag-1 autocorrelation of the daily sums is averaged over the assets:

    .venv/bin/python benchmarks/synthetic_autocorrelation.py                 # 0 .. 1.0, 500 sessions x 20
    .venv/bin/python benchmarks/synthetic_autocorrelation.py --signals 0.1 0.7 --json
    .venv/bin/python benchmarks/synthetic_autocorrelation.py --signals 0.7 --lookback 585 --rule-seeds 0 1

``--lookback`` tries another lookback than the generator's. ``--rule-seeds`` adds how much of the
edge the features show: on the demo's market (100 tickers x 243 sessions, the last 126 the test
window) of each seed, the t-statistic of the daily excess over equal-weight buy-and-hold of a causal
rule holding the top 20 assets by ``ret_390`` (decide at bar t, fill at t+1's open, rebalance every 15
bars, 0.2% proportional costs). With ``L = 390`` that feature is the predictor itself; with a longer
lookback it sees part of it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from data.synthetic import MOMENTUM_LOOKBACK, PHI_PER_SIGNAL, SyntheticSpec, _planted_momentum, generate  # noqa: E402

BARS = 390


#: The demo's market (app.workflows.demo, default preset) and the rule of ``feature_rule_t``.
RULE_TICKERS, RULE_SESSIONS, RULE_TEST_SESSIONS = 100, 243, 126
RULE_TOP, RULE_EVERY, RULE_COST = 20, 15, 0.002  # top 20 by ret_390, every 15 bars, 0.2% costs
RULE_FEATURE_BARS = 390  # ret_390, the longest return feature (data.features)


def daily_autocorrelation(
    signal: float, *, sessions: int, assets: int, seed: int = 0, lookback: int = MOMENTUM_LOOKBACK
) -> float:
    """Mean over ``assets`` of the lag-1 autocorrelation of the daily idiosyncratic returns at
    ``signal`` (``sessions`` sessions of 390 bars, the first 5 dropped as burn-in)."""
    rng = np.random.default_rng([seed, int(round(signal * 1000))])
    burn = 5
    eps = rng.standard_normal(((sessions + burn) * BARS, assets))
    idio = _planted_momentum(eps, PHI_PER_SIGNAL * signal, lookback)
    daily = idio.reshape(sessions + burn, BARS, assets).sum(axis=1)[burn:]
    d = daily - daily.mean(axis=0)
    rho = (d[1:] * d[:-1]).sum(axis=0) / (d * d).sum(axis=0)
    return float(rho.mean())


def feature_rule_t(signal: float, *, seed: int, lookback: int = MOMENTUM_LOOKBACK) -> float:
    """t-statistic of the daily excess (log, over equal-weight buy-and-hold from the test window's
    first open) of the top-``RULE_TOP`` rule on ``ret_390`` over the demo market's test window."""
    spec = SyntheticSpec(
        num_tickers=RULE_TICKERS, num_sessions=RULE_SESSIONS, seed=seed, signal=signal, lookback=lookback
    )
    panel = generate(spec)
    opens, sid = panel.open, panel.grid.session_id
    log_close = np.log(panel.close)
    score = np.zeros_like(log_close)
    score[RULE_FEATURE_BARS:] = log_close[RULE_FEATURE_BARS:] - log_close[:-RULE_FEATURE_BARS]
    t = int(np.flatnonzero(sid == RULE_SESSIONS - RULE_TEST_SESSIONS)[0])
    start, value, held = t + 1, 1.0, np.zeros(opens.shape[1])
    day_value: dict[int, tuple[float, int]] = {}  # session -> (rule's value, bar) at its last fill
    while t + 1 + RULE_EVERY < len(opens):
        target = np.zeros(opens.shape[1])
        target[np.argsort(-score[t])[:RULE_TOP]] = 1.0 / RULE_TOP
        value *= 1 - RULE_COST * np.abs(target - held).sum()
        growth = opens[t + 1 + RULE_EVERY] / opens[t + 1]
        port = float((target * growth).sum())
        value, held, t = value * port, target * growth / port, t + RULE_EVERY
        day_value[int(sid[t + 1])] = (value, t + 1)
    values = np.array([v for v, _ in day_value.values()])
    bars = [b for _, b in day_value.values()]
    benchmark = np.mean(opens[bars] / opens[start], axis=1)
    excess = np.diff(np.log(values)) - np.diff(np.log(benchmark))
    return float(excess.mean() / excess.std(ddof=1) * np.sqrt(len(excess)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--signals", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.15, 0.25, 0.35, 0.5, 0.7, 1.0]
    )
    p.add_argument("--sessions", type=int, default=500)
    p.add_argument("--assets", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lookback", type=int, default=MOMENTUM_LOOKBACK, help="bars (default: the generator's)")
    p.add_argument("--rule-seeds", type=int, nargs="*", default=[], help="also the ret_390 rule's t per seed")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.lookback < 1:
        p.error(f"--lookback must be >= 1 (got {args.lookback})")
    rows = []
    for s in args.signals:
        row = {
            "signal": s,
            "phi": PHI_PER_SIGNAL * s,
            "daily_lag1_autocorrelation": daily_autocorrelation(
                s, sessions=args.sessions, assets=args.assets, seed=args.seed, lookback=args.lookback
            ),
        }
        if args.rule_seeds:
            row["ret_390_rule_t"] = [
                feature_rule_t(s, seed=k, lookback=args.lookback) for k in args.rule_seeds
            ]
        rows.append(row)
    if args.json:
        print(json.dumps({"lookback_bars": args.lookback, "sessions": args.sessions, "assets": args.assets,
                          "rule_seeds": args.rule_seeds, "rows": rows}, indent=2))  # fmt: skip
    else:
        print(f"lookback {args.lookback} bars; {args.sessions} sessions x {args.assets} assets")
        for r in rows:
            rule = r.get("ret_390_rule_t")
            print(
                f"signal {r['signal']:<5g} phi {r['phi']:.3f}  daily lag-1 autocorrelation {r['daily_lag1_autocorrelation']:+.3f}"
                + (f"  ret_390 rule t {' / '.join(f'{x:.2f}' for x in rule)}" if rule else "")
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
