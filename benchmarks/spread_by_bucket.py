"""The half-spread the env charges per name and time of day on the shipped real sample, by bucket.

``MarketData.half_spread`` (``data.liquidity.spread_estimate``: Abdi and Ranaldo's estimate per
half-hour bucket over the sessions before the fill bar's) at every decision bar of the last session,
grouped by the fill bar's bucket: the median of the raw estimate and of what a fill pays with
``[env] spread = "estimate"`` (at least ``spread_bps``), in basis points of the price:

    .venv/bin/python benchmarks/spread_by_bucket.py
    .venv/bin/python benchmarks/spread_by_bucket.py --buckets 0 1 5 12 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from data.liquidity import SPREAD_BUCKET_BARS, position_in_session  # noqa: E402
from data.loader import load_market  # noqa: E402
from envs.params import EnvParams  # noqa: E402


def by_bucket(buckets: list[int], spread_bps: float) -> dict:
    """Per bucket and ticker: ``{"raw": bp, "charged": bp}`` medians over the last session."""
    full = load_market(source="real-sample").full
    pos = position_in_session(full.session_id)
    fill_bucket = torch.div(pos[1:], SPREAD_BUCKET_BARS, rounding_mode="floor")  # row t fills at t + 1
    last = full.session_id[1:] == full.session_id[-1]
    raw = full.half_spread[:-1].double() * 1e4
    charged = raw.clamp(min=spread_bps)
    first = int(torch.nonzero(full.session_id == full.session_id[-1])[0])
    start = pd.Timestamp(full.timestamps[first], tz="UTC").tz_convert("America/New_York")
    out = {"tickers": list(full.tickers), "dates": list(full.date_range()), "buckets": {}}
    for b in buckets:
        rows = (fill_bucket == b) & last
        if not bool(rows.any()):
            continue
        begin = start + pd.Timedelta(minutes=b * SPREAD_BUCKET_BARS)
        end = begin + pd.Timedelta(minutes=SPREAD_BUCKET_BARS)
        label = f"{begin:%H:%M}-{end:%H:%M} ET"
        out["buckets"][label] = {
            t: {"raw": round(float(r), 2), "charged": round(float(c), 2)}
            for t, r, c in zip(
                full.tickers,
                raw[rows].median(0).values.tolist(),
                charged[rows].median(0).values.tolist(),
                strict=True,
            )
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets", type=int, nargs="+", default=[0, 1, 5, 12])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = by_bucket(args.buckets, EnvParams().spread_bps)
    if args.json:
        print(json.dumps(result))
        return
    print(f"real sample {result['dates'][0]}..{result['dates'][1]}, last session; bp (raw / charged)")
    print("bucket".ljust(22) + "".join(t.rjust(14) for t in result["tickers"]))
    for label, row in result["buckets"].items():
        cells = "".join(f"{v['raw']:.2f} / {v['charged']:.2f}".rjust(14) for v in row.values())
        print(label.ljust(22) + cells)


if __name__ == "__main__":
    main()
