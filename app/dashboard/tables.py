"""Store rows and small frames as readable tables: nested cells as short text, times as UTC.

No Streamlit here, so every function is unit-tested directly.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd


def tidy_table(frame: pd.DataFrame, time_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A store's rows ready for ``st.dataframe``: nested cells as short text, times as UTC.

    Nested cells (hyper-parameters, metrics, payloads) would otherwise make the Arrow conversion
    fall back or fail, and a JSON string is unreadable in a grid cell: lists become ``a, b``, dicts
    ``key: value; ...`` with compact numbers. Unix-second time columns become timestamps.
    """
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype != object and not pd.api.types.is_string_dtype(out[col]):
            continue
        # Stores keep nested values as JSON text (the paper journal's tickers and weights): parse it.
        parsed = out[col].map(_json_or_value)
        if parsed.map(lambda v: isinstance(v, dict | list | tuple)).any():
            out[col] = parsed.map(plain_text)
    for col in time_columns:
        if col in out.columns:
            out[col] = to_time(out[col])
    return out


def _json_or_value(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def plain_text(value: Any) -> Any:
    """A nested value as readable text (no braces, no quotes); scalars unchanged."""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_short(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(str(_short(v)) for v in value)
    return value


def _short(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list | tuple):
        return plain_text(value)
    return value


def first_column(frame: pd.DataFrame, *names: str) -> str | None:
    """The first of ``names`` that is a column of ``frame`` (stages name things slightly differently)."""
    return next((n for n in names if n in frame.columns), None)


def markdown_table(table: pd.DataFrame) -> str:
    """A small DataFrame as a GitHub-flavoured markdown table (index as the first column)."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    head = [cell(table.index.name or ""), *map(cell, table.columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for index, row in table.iterrows():
        lines.append("| " + " | ".join([cell(index), *map(cell, row.tolist())]) + " |")
    return "\n".join(lines)


def to_time(col: pd.Series) -> pd.Series:
    """A time column as UTC timestamps (numbers read as Unix seconds; unreadable text as NaT)."""
    if pd.api.types.is_numeric_dtype(col):
        # Unix seconds are the usual SQLite convention.
        return pd.to_datetime(col, unit="s", utc=True)
    return pd.to_datetime(col, utc=True, errors="coerce", format="mixed")
