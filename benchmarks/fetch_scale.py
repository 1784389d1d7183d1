"""Fetch 1-minute NASDAQ-100 bars at scale through the real alpaca-py client from a local stand-in.

Serves ``--months`` of generated 1-minute bars for the NASDAQ-100 members on the start date (plus
10% IEX-like missing minutes, pages of 10,000 bars, a few HTTP 429s with Retry-After) from
``tests/alpaca_fake.py`` on loopback, then runs in child processes (so each peak RSS is its own):

- ``fetch``: ``data.sources.stream.fetch_to_store`` into a fresh store (validate, align, write per
  chunk, manifest), the product path;
- ``bare``: a bare paging loop over the same chunks and pages (``requests`` + ``json``, nothing kept);
- ``models`` (``--compare-parse``): alpaca-py's ``get_stock_bars`` with its model objects (one
  ``Bar`` per bar) vs the REST-layer column parsing on the same first chunks.

Prints wall time, bars, bars/s and peak RSS (``resource.getrusage`` in each child) and the ratio of
the fetch to the bare loop. Run: ``PYTHONPATH=. python benchmarks/fetch_scale.py --months 3``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import pandas as pd

from data.sources import alpaca
from data.sources.chunks import plan_chunks
from data.sources.retry import FetchRetryPolicy
from data.sources.stream import fetch_to_store
from data.universe import members
from tests.alpaca_fake import KEY_ID, SECRET, FakeAlpaca, minute_bars

START = date(2024, 1, 2)
ENDS = {3: date(2024, 3, 31), 12: date(2024, 12, 31)}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _child(mode: str, months: int, home: str, batch: int) -> dict:
    tickers = members(START)
    end = ENDS[months]
    started = time.perf_counter()
    if mode == "fetch":
        report = fetch_to_store(
            home, "alpaca", tickers, str(START), str(end), batch=batch, policy=FetchRetryPolicy()
        )
        bars, extra = (
            report.bars_fetched,
            {"throttled": report.requests_throttled, "files": report.files_written},
        )
    elif mode == "bare":
        import requests

        bars, extra = 0, {}
        session = requests.Session()
        headers = {"APCA-API-KEY-ID": KEY_ID, "APCA-API-SECRET-KEY": SECRET}
        url = os.environ["APCA_API_DATA_URL"] + "/v2/stocks/bars"
        for chunk in plan_chunks(tickers, START, end, batch=batch):
            lo = pd.Timestamp(chunk.start).tz_localize("America/New_York").tz_convert("UTC")
            hi = pd.Timestamp(chunk.stop).tz_localize("America/New_York").tz_convert("UTC")
            params = {"symbols": ",".join(chunk.tickers), "timeframe": "1Min", "start": lo.isoformat(),
                      "end": hi.isoformat(), "limit": 10_000, "adjustment": "all", "feed": "iex"}  # fmt: skip
            token = None
            while True:
                while True:
                    reply = session.get(url, params={**params, "page_token": token}, headers=headers)
                    if reply.status_code != 429:
                        break
                    time.sleep(float(reply.headers.get("Retry-After", "1")))
                page = reply.json()
                bars += sum(len(v) for v in page["bars"].values())
                token = page.get("next_page_token")
                if not token:
                    break
    else:  # models vs columns on the first chunks
        from alpaca.data.requests import StockBarsRequest
        from alpaca.data.timeframe import TimeFrame

        client = alpaca.make_client()
        chunks = plan_chunks(tickers, START, end, batch=batch)[:3]
        t0 = time.perf_counter()
        model_bars = 0
        for chunk in chunks:
            lo = pd.Timestamp(chunk.start).tz_localize("America/New_York").tz_convert("UTC")
            hi = pd.Timestamp(chunk.stop).tz_localize("America/New_York").tz_convert("UTC")
            barset = client.get_stock_bars(
                StockBarsRequest(
                    symbol_or_symbols=list(chunk.tickers),
                    timeframe=TimeFrame.Minute,
                    start=lo.to_pydatetime(),
                    end=hi.to_pydatetime(),
                )  # fmt: skip
            )
            model_bars += sum(len(v) for v in barset.data.values())
        t1 = time.perf_counter()
        client = alpaca.quiet_client(client)
        column_bars = sum(len(alpaca.fetch_chunk(client, c.tickers, c.start, c.stop, "1m")) for c in chunks)
        t2 = time.perf_counter()
        bars = column_bars
        extra = {"models_s": round(t1 - t0, 2), "columns_s": round(t2 - t1, 2), "model_bars": model_bars}
    return {"mode": mode, "wall_s": round(time.perf_counter() - started, 2), "bars": bars,
            "peak_rss_mb": round(_peak_rss_mb(), 1), **extra}  # fmt: skip


def _run_child(mode: str, args: argparse.Namespace, fake: FakeAlpaca, home: str) -> dict:
    fake.faults.clear()
    if mode != "models":  # alpaca-py's own get_stock_bars would only sleep 3 s per 429 here
        fake.fail("GET", "/v2/stocks/bars", status=429, retry_after="0.2", times=args.throttle)
    env = {
        **os.environ,
        "APCA_API_KEY_ID": KEY_ID,
        "APCA_API_SECRET_KEY": SECRET,
        "APCA_API_DATA_URL": fake.url,
    }
    cmd = [sys.executable, __file__, "--child", mode, "--months", str(args.months), "--home", home,
           "--batch", str(args.batch)]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{mode} child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@functools.lru_cache(maxsize=4)
def _served(symbols: tuple[str, ...], start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    # Every page of a chunk asks for the same window: generate it once.
    return minute_bars(list(symbols), start, end, missing=0.1).sort_values(
        ["ticker", "timestamp"], kind="stable"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--months", type=int, choices=sorted(ENDS), default=3)
    parser.add_argument("--batch", type=int, default=10, help="tickers per chunk")
    parser.add_argument("--throttle", type=int, default=5, help="HTTP 429s served (Retry-After 0.2 s)")
    parser.add_argument("--compare-parse", action="store_true", help="also time alpaca-py's model objects")
    parser.add_argument("--child", choices=["fetch", "bare", "models"], help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.months, args.home, args.batch)))
        return
    source = lambda symbols, start, end: _served(tuple(symbols), start, end)  # noqa: E731
    with FakeAlpaca(bar_source=source, page_size=10_000) as fake, tempfile.TemporaryDirectory() as tmp:
        print(f"{len(members(START))} NASDAQ-100 members, {START}..{ENDS[args.months]}, 1m bars, "
              f"batch {args.batch}, cpus {os.cpu_count()} (load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
        results = [
            _run_child("bare", args, fake, tmp),
            _run_child("fetch", args, fake, str(Path(tmp) / "home")),
        ]
        if args.compare_parse:
            results.append(_run_child("models", args, fake, tmp))
    for r in results:
        rate = r["bars"] / r["wall_s"] if r["wall_s"] else 0.0
        rest = {k: v for k, v in r.items() if k not in ("mode", "wall_s", "bars", "peak_rss_mb")}
        print(f"{r['mode']:>6}: {r['wall_s']:8.1f} s  {r['bars']:>11,} bars  {rate:>9,.0f} bars/s  "
              f"peak RSS {r['peak_rss_mb']:7.1f} MB  {rest}", flush=True)  # fmt: skip
    bare, fetch = results[0], results[1]
    print(f"fetch / bare paging loop: {fetch['wall_s'] / bare['wall_s']:.2f}x wall; "
          f"peak RSS {fetch['peak_rss_mb']:.0f} MB (bound 1024 MB)")  # fmt: skip


if __name__ == "__main__":
    main()
