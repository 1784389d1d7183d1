"""The bar schema and its validation.

Bar schema (one row per bar): ``timestamp`` (UTC bar start), ``ticker``, ``open``, ``high``, ``low``,
``close``, ``volume``. Daily files may have a ``date`` column (``YYYY-MM-DD``) instead of
``timestamp``. Timestamps in text must be ISO 8601 with an offset or ``Z``: a naive time is
ambiguous (exchange time? UTC?) and is rejected rather than guessed.

``validate`` parses and checks a frame and returns it normalized (``timestamp`` as
``datetime64[ns, UTC]``, ``ticker`` str spelled by the ticker rule below, prices and volume float64),
or raises a one-line ``DataError`` naming the source, row (1-based data row; the file line is
row + 1), ticker and rule.
When several rows break rules, the earliest row is reported, with a count of the others.

Rules: empty input; missing columns; empty ticker; ticker not matching the ticker rule; wrong types
(unparsable number or timestamp, naive timestamp); NaN or inf; price <= 0; negative volume; high < low;
open or close outside [low, high]; duplicate (ticker, timestamp); timestamps of a ticker not
increasing (unsorted).

The ticker rule (``normalize_ticker``, the one place it lives): surrounding blanks stripped,
upper-cased, a share class written with ``/`` (``BRK/B``) rewritten with ``.`` (``BRK.B``, logged as a
note), then the ticker must match ``^[A-Z0-9][A-Z0-9.\\-]{0,14}$``. Tickers name store folders and
API queries, so anything else (``../x``, ``a/b/c``, blanks inside, non-ASCII letters, more than 15
characters) is refused before any path or request is built from it.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pandas as pd

from data.errors import DataError

log = logging.getLogger(__name__)

PRICE_COLUMNS = ("open", "high", "low", "close")
NUMERIC_COLUMNS = (*PRICE_COLUMNS, "volume")
COLUMNS = ("timestamp", "ticker", *NUMERIC_COLUMNS)

_OFFSET_RE = r"(?:Z|z|[+-]\d{2}:?\d{2})$"
_DATE_RE = r"^\d{4}-\d{2}-\d{2}$"

TICKER_PATTERN = r"^[A-Z0-9][A-Z0-9.\-]{0,14}$"
TICKER_RULE = (
    f"ticker must match {TICKER_PATTERN} after upper-casing "
    "(letters, digits, '.', '-'; at most 15; share classes as BRK.B)"
)
# fullmatch, not match: ``$`` would also accept a trailing newline.
_TICKER_RE = re.compile(r"[A-Z0-9][A-Z0-9.\-]{0,14}")
# ``ROOT/CLASS`` with one slash: the share-class spelling of some vendors (BRK/B); a path such as
# ``a/b/c`` or ``../x`` is not one.
_SHARE_CLASS_RE = re.compile(r"[A-Z0-9][A-Z0-9.\-]*/[A-Z0-9]+")


def _shown(text: str) -> str:
    """``text`` as printed in a one-line message: quoted (``ascii``) unless plain printable ASCII."""
    return text if text.isascii() and text.isprintable() and " " not in text else ascii(text)


def _normalize(value: object) -> tuple[str, str | None]:
    """(normalized ticker, None) or (the upper-cased text, the rule it breaks)."""
    text = str(value).strip().upper()
    if not text:
        return text, "empty ticker"
    if _SHARE_CLASS_RE.fullmatch(text):
        text = text.replace("/", ".")
    if not _TICKER_RE.fullmatch(text):
        return str(value).strip().upper(), TICKER_RULE
    return text, None


def normalize_ticker(ticker: str, *, source: str = "ticker") -> str:
    """The ticker in its one stored spelling (upper case, ``BRK/B`` -> ``BRK.B``), or a one-line
    DataError naming ``source``, the ticker and the rule. Every path or query built from a ticker a
    user typed goes through here."""
    if not isinstance(ticker, str):
        raise DataError(f"{source}: ticker {ticker!r} is not text: {TICKER_RULE}")
    text, broken = _normalize(ticker)
    if broken is not None:
        raise DataError(f"{source}: ticker {_shown(text)}: {broken}")
    if text != ticker.strip().upper():
        log.info("%s: ticker %s is written %s (share classes use '.')", source, _shown(ticker.strip()), text)
    return text


def _fail(source: str, frame: pd.DataFrame, bad: np.ndarray, rule: str) -> None:
    rows = np.flatnonzero(bad)
    if len(rows) == 0:
        return
    first = int(rows[0])
    ticker = _shown(str(frame["ticker"].iloc[first])) if "ticker" in frame else "?"
    more = f" (and {len(rows) - 1} more rows)" if len(rows) > 1 else ""
    raise DataError(f"{source}: row {first + 1}, ticker {ticker}: {rule}{more}")


class _Checks:
    """Collects (mask, rule) pairs and reports the earliest offending row across all rules."""

    def __init__(self, source: str, frame: pd.DataFrame) -> None:
        self.source, self.frame = source, frame
        self.found: list[tuple[int, np.ndarray, str]] = []

    def add(self, bad: np.ndarray | pd.Series, rule: str) -> None:
        bad = np.asarray(bad, dtype=bool)
        if bad.any():
            self.found.append((int(np.argmax(bad)), bad, rule))

    def raise_first(self) -> None:
        if not self.found:
            return
        first, bad, rule = min(self.found, key=lambda item: item[0])
        total = np.zeros(len(self.frame), dtype=bool)
        for _, mask, _ in self.found:
            total |= mask
        others = int(total.sum()) - 1
        ticker = _shown(str(self.frame["ticker"].iloc[first]))
        more = f" (and {others} more bad rows)" if others > 0 else ""
        raise DataError(f"{self.source}: row {first + 1}, ticker {ticker}: {rule}{more}")


def _parse_timestamps(frame: pd.DataFrame, source: str) -> tuple[pd.Series, bool]:
    """UTC timestamps from ``timestamp`` (ISO with offset) or ``date`` (daily); (series, is_daily)."""
    if "timestamp" in frame:
        col, is_daily = frame["timestamp"], False
    else:
        col, is_daily = frame["date"], True
    if isinstance(col.dtype, pd.DatetimeTZDtype):
        return col.dt.tz_convert("UTC").astype("datetime64[ns, UTC]"), is_daily
    if pd.api.types.is_datetime64_dtype(col.dtype):
        if is_daily:
            return col.dt.tz_localize("UTC").astype("datetime64[ns, UTC]"), True
        _fail(source, frame, np.ones(len(frame), bool), "timestamp has no UTC offset (naive time)")
    text = col.astype("string").str.strip()
    checks = _Checks(source, frame)
    checks.add(text.isna().to_numpy(), "missing timestamp")
    if is_daily:
        date_like = text.str.match(_DATE_RE).fillna(False).to_numpy(dtype=bool)
        checks.add(~date_like & text.notna().to_numpy(), "date is not YYYY-MM-DD")
        parsed = pd.to_datetime(text.where(date_like), errors="coerce", format="%Y-%m-%d", utc=True)
    else:
        has_offset = text.str.contains(_OFFSET_RE, regex=True).fillna(False).to_numpy(dtype=bool)
        checks.add(~has_offset & text.notna().to_numpy(), "timestamp has no UTC offset or Z (naive time)")
        parsed = pd.to_datetime(text.where(has_offset), errors="coerce", format="ISO8601", utc=True)
    bad = parsed.isna().to_numpy() & text.notna().to_numpy()
    checks.add(bad, "timestamp is not an ISO 8601 time")
    checks.raise_first()
    return pd.Series(parsed, index=frame.index).astype("datetime64[ns, UTC]"), is_daily


def _check_tickers(frame: pd.DataFrame, source: str) -> None:
    """Normalize ``frame["ticker"]`` in place (the ticker rule, once per distinct value: fast on
    millions of rows) or raise naming the earliest bad row."""
    codes, uniques = pd.factorize(frame["ticker"], use_na_sentinel=True)
    results = [_normalize(u) for u in uniques]
    names = np.array([text or "?" for text, _ in results] + ["?"], dtype=object)
    broken = [rule for _, rule in results] + ["empty ticker"]
    codes = np.where(codes < 0, len(uniques), codes)  # NaN -> "?", an empty ticker
    frame["ticker"] = names[codes]
    checks = _Checks(source, frame)
    for rule in ("empty ticker", TICKER_RULE):
        bad_codes = [i for i, r in enumerate(broken) if r == rule]
        if bad_codes:
            checks.add(np.isin(codes, bad_codes), rule)
    checks.raise_first()
    for raw, (text, rule) in zip(uniques, results, strict=True):
        if rule is None and text != str(raw).strip().upper():
            log.info("%s: ticker %s is written %s (share classes use '.')", source, _shown(str(raw)), text)


def validate(frame: pd.DataFrame, *, source: str = "input") -> pd.DataFrame:
    """Check ``frame`` against the bar schema; return it normalized or raise a one-line DataError."""
    if frame is None or len(frame) == 0:
        raise DataError(f"{source}: no bars (empty input)")
    frame = frame.reset_index(drop=True)
    frame.columns = [str(c).strip().lower() for c in frame.columns]
    time_col = "timestamp" if "timestamp" in frame else ("date" if "date" in frame else None)
    missing = [c for c in COLUMNS if c != "timestamp" and c not in frame]
    if time_col is None:
        missing.insert(0, "timestamp (or date)")
    if missing:
        raise DataError(f"{source}: missing column(s) {', '.join(missing)} (need {','.join(COLUMNS)})")

    _check_tickers(frame, source)
    checks = _Checks(source, frame)

    timestamps, _ = _parse_timestamps(frame, source)

    numbers = {}
    for col in NUMERIC_COLUMNS:
        raw = frame[col]
        if pd.api.types.is_bool_dtype(raw.dtype):
            checks.add(np.ones(len(frame), bool), f"{col} has the wrong type (bool)")
            continue
        values = pd.to_numeric(raw, errors="coerce")
        not_number = values.isna().to_numpy() & raw.notna().to_numpy()
        checks.add(not_number, f"{col} is not a number")
        numbers[col] = values.to_numpy(dtype=np.float64, na_value=np.nan)
    checks.raise_first()

    for col in NUMERIC_COLUMNS:
        checks.add(np.isnan(numbers[col]), f"{col} is NaN/missing")
        checks.add(np.isinf(numbers[col]), f"{col} is infinite")
    checks.raise_first()
    o, h, low, c, v = (numbers[col] for col in NUMERIC_COLUMNS)
    for col in PRICE_COLUMNS:
        checks.add(numbers[col] <= 0, f"{col} <= 0 (prices must be positive)")
    checks.add(v < 0, "volume < 0")
    checks.add(h < low, "high < low")
    checks.add((o < low) | (o > h), "open outside [low, high]")
    checks.add((c < low) | (c > h), "close outside [low, high]")
    checks.raise_first()

    out = pd.DataFrame(
        {
            "timestamp": timestamps.to_numpy(),
            "ticker": frame["ticker"].astype(str).to_numpy(),
            "open": o,
            "high": h,
            "low": low,
            "close": c,
            "volume": v,
        }
    )
    out["timestamp"] = out["timestamp"].astype("datetime64[ns, UTC]")
    checks = _Checks(source, out)
    checks.add(
        out.duplicated(["ticker", "timestamp"], keep="first").to_numpy(), "duplicate (ticker, timestamp)"
    )
    ns = out["timestamp"].astype("int64").to_numpy()
    prev = out.groupby("ticker", sort=False)["timestamp"].shift(1)
    has_prev = prev.notna().to_numpy()
    prev_ns = prev.fillna(out["timestamp"]).astype("int64").to_numpy()
    checks.add(has_prev & (ns < prev_ns), "timestamps not in increasing order for this ticker (unsorted)")
    checks.raise_first()
    return out
