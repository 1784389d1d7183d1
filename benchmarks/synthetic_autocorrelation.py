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
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from data.synthetic import MOMENTUM_LOOKBACK, PHI_PER_SIGNAL, _planted_momentum  # noqa: E402

BARS = 390


def daily_autocorrelation(signal: float, *, sessions: int, assets: int, seed: int = 0) -> float:
    """Mean over ``assets`` of the lag-1 autocorrelation of the daily idiosyncratic returns at
    ``signal`` (``sessions`` sessions of 390 bars, the first 5 dropped as burn-in)."""
    rng = np.random.default_rng([seed, int(round(signal * 1000))])
    burn = 5
    eps = rng.standard_normal(((sessions + burn) * BARS, assets))
    idio = _planted_momentum(eps, PHI_PER_SIGNAL * signal, MOMENTUM_LOOKBACK)
    daily = idio.reshape(sessions + burn, BARS, assets).sum(axis=1)[burn:]
    d = daily - daily.mean(axis=0)
    rho = (d[1:] * d[:-1]).sum(axis=0) / (d * d).sum(axis=0)
    return float(rho.mean())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--signals", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.15, 0.25, 0.35, 0.5, 0.7, 1.0]
    )
    p.add_argument("--sessions", type=int, default=500)
    p.add_argument("--assets", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = [
        {
            "signal": s,
            "phi": PHI_PER_SIGNAL * s,
            "daily_lag1_autocorrelation": daily_autocorrelation(
                s, sessions=args.sessions, assets=args.assets, seed=args.seed
            ),
        }
        for s in args.signals
    ]
    if args.json:
        print(json.dumps({"lookback_bars": MOMENTUM_LOOKBACK, "sessions": args.sessions, "assets": args.assets,
                          "rows": rows}, indent=2))  # fmt: skip
    else:
        print(f"lookback {MOMENTUM_LOOKBACK} bars; {args.sessions} sessions x {args.assets} assets")
        for r in rows:
            print(
                f"signal {r['signal']:<5g} phi {r['phi']:.3f}  daily lag-1 autocorrelation {r['daily_lag1_autocorrelation']:+.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
