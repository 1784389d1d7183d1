"""Every validation rule: validate() names source/row/ticker/rule; the CLI prints one line, exits 2,
prints no traceback, and leaves the store byte-for-byte unchanged."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import file_hashes

from app.cli import main
from data.errors import DataError
from data.schema import TICKER_RULE, normalize_ticker, validate

HEADER = "timestamp,ticker,open,high,low,close,volume"


def _good_rows(ticker: str = "SPY", n: int = 8, minute0: int = 30) -> list[str]:
    return [f"2013-10-04T13:{minute0 + i:02d}:00Z,{ticker},10.0,10.5,9.5,10.2,100" for i in range(n)]


def _csv(rows: list[str], header: str = HEADER) -> str:
    return "\n".join([header, *rows]) + "\n"


def _with_row(bad: str, at: int = 4) -> str:
    rows = _good_rows()
    rows[at] = bad
    return _csv(rows)


T = "2013-10-04T13:34:00Z"
CASES = {
    "empty_file": ("", "no bars (empty input)"),
    "header_only": (HEADER + "\n", "no bars (empty input)"),
    "missing_column": (
        _csv([r.rsplit(",", 1)[0] for r in _good_rows()], HEADER.rsplit(",", 1)[0]),
        "missing column(s) volume",
    ),
    "missing_timestamp_column": (
        _csv([r.split(",", 1)[1] for r in _good_rows()], HEADER.split(",", 1)[1]),
        "missing column(s) timestamp (or date)",
    ),
    "not_a_number": (_with_row(f"{T},SPY,abc,10.5,9.5,10.2,100"), "row 5, ticker SPY: open is not a number"),
    "naive_timestamp": (
        _with_row("2013-10-04 13:34:00,SPY,10,10.5,9.5,10.2,100"),
        "row 5, ticker SPY: timestamp has no UTC offset",
    ),
    "bad_timestamp": (
        _with_row("2013-13-45T99:00:00Z,SPY,10,10.5,9.5,10.2,100"),
        "row 5, ticker SPY: timestamp is not an ISO 8601 time",
    ),
    "nan": (_with_row(f"{T},SPY,10,10.5,9.5,NaN,100"), "row 5, ticker SPY: close is NaN/missing"),
    "missing_value": (_with_row(f"{T},SPY,10,10.5,9.5,,100"), "row 5, ticker SPY: close is NaN/missing"),
    "inf": (_with_row(f"{T},SPY,10,inf,9.5,10.2,100"), "row 5, ticker SPY: high is infinite"),
    "zero_price": (_with_row(f"{T},SPY,10,10.5,0,10.2,100"), "row 5, ticker SPY: low <= 0"),
    "negative_price": (_with_row(f"{T},SPY,-1,10.5,-2,10.2,100"), "row 5, ticker SPY: open <= 0"),
    "negative_volume": (_with_row(f"{T},SPY,10,10.5,9.5,10.2,-5"), "row 5, ticker SPY: volume < 0"),
    "high_below_low": (_with_row(f"{T},SPY,10,9.0,9.5,9.2,100"), "row 5, ticker SPY: high < low"),
    "open_outside": (
        _with_row(f"{T},SPY,11,10.5,9.5,10.2,100"),
        "row 5, ticker SPY: open outside [low, high]",
    ),
    "close_outside": (
        _with_row(f"{T},SPY,10,10.5,9.5,9.0,100"),
        "row 5, ticker SPY: close outside [low, high]",
    ),
    "duplicate": (
        _with_row("2013-10-04T13:33:00Z,SPY,10,10.5,9.5,10.2,100"),
        "row 5, ticker SPY: duplicate (ticker, timestamp)",
    ),
    "unsorted": (
        _with_row("2013-10-04T13:31:30Z,SPY,10,10.5,9.5,10.2,100"),
        "row 5, ticker SPY: timestamps not in increasing order",
    ),
    "empty_ticker": (_with_row(f"{T},,10,10.5,9.5,10.2,100"), "row 5, ticker ?: empty ticker"),
    "blank_ticker": (_with_row(f"{T},   ,10,10.5,9.5,10.2,100"), "row 5, ticker ?: empty ticker"),
    "path_like_ticker": (
        _with_row(f"{T},../../../../x,10,10.5,9.5,10.2,100"),
        "row 5, ticker ../../../../X: ticker must match ^[A-Z0-9][A-Z0-9.\\-]{0,14}$",
    ),
    "slashes_ticker": (
        _with_row(f"{T},a/b/c,10,10.5,9.5,10.2,100"),
        "row 5, ticker A/B/C: ticker must match",
    ),
    "too_long_ticker": (
        _with_row(f"{T},ABCDEFGHIJKLMNOP,10,10.5,9.5,10.2,100"),
        "row 5, ticker ABCDEFGHIJKLMNOP: ticker must match",
    ),
    "space_in_ticker": (_with_row(f"{T},BRK B,10,10.5,9.5,10.2,100"), "row 5, ticker 'BRK B': ticker must"),
    "dash_first_ticker": (_with_row(f"{T},-X,10,10.5,9.5,10.2,100"), "row 5, ticker -X: ticker must match"),
}


@pytest.fixture
def seeded_home(tmp_path):
    """A home whose store already holds good bars of two tickers."""
    home = tmp_path / "home"
    good = tmp_path / "good.csv"
    good.write_text(_csv(_good_rows("QQQ") + _good_rows("SPY", minute0=40)))
    assert main(["--home", str(home), "data", "import", str(good)]) == 0
    return home


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_names_row_ticker_and_rule(case, tmp_path):
    text, expected = CASES[case]
    path = tmp_path / f"{case}.csv"
    path.write_text(text)
    from data.sources.csv import read_csv

    with pytest.raises(DataError) as err:
        read_csv(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(str(path)) and expected in message, message


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_rejects_bad_file_in_one_line_and_leaves_store_unchanged(case, seeded_home, tmp_path, capsys):
    text, expected = CASES[case]
    bad = tmp_path / f"{case}.csv"
    bad.write_text(text)
    # A good file first: it must not be written either (validation of everything precedes writing).
    fresh = tmp_path / "fresh.csv"
    fresh.write_text(_csv(_good_rows("AAA")))
    before = file_hashes(seeded_home)
    capsys.readouterr()
    rc = main(["--home", str(seeded_home), "data", "import", str(fresh), str(bad)])
    captured = capsys.readouterr()
    assert rc == 2
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), captured.err
    assert expected in lines[0] and bad.name in lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert file_hashes(seeded_home) == before


def test_unreadable_and_missing_files_are_one_line_errors(seeded_home, tmp_path, capsys):
    binary = tmp_path / "bars.csv"
    binary.write_bytes(b"\x00\xff\xfe garbage \x00" * 50)
    before = file_hashes(seeded_home)
    for path in (binary, tmp_path / "missing.csv"):
        capsys.readouterr()
        rc = main(["--home", str(seeded_home), "data", "import", str(path)])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert file_hashes(seeded_home) == before


def test_earliest_bad_row_is_reported_with_a_count():
    frame = pd.DataFrame(
        {
            "timestamp": ["2024-01-02T14:30:00Z", "2024-01-02T14:31:00Z", "2024-01-02T14:32:00Z"],
            "ticker": ["a", "a", "a"],
            "open": [1.0, -1.0, 1.0],
            "high": [1.0, 1.0, 0.5],
            "low": [1.0, 1.0, 0.9],
            "close": [1.0, 1.0, 1.0],
            "volume": [1, 1, 1],
        }
    )
    with pytest.raises(DataError, match=r"^frame: row 2, ticker A: open <= 0 .*\(and 1 more bad rows\)$"):
        validate(frame, source="frame")


def test_valid_input_is_normalized():
    frame = pd.DataFrame(
        {
            "Timestamp": ["2024-01-02T09:30:00-05:00", "2024-01-02T14:31:00Z"],
            "Ticker": [" spy", "SPY"],
            "open": ["1", "2"],
            "high": [1, 2],
            "low": [1, 2],
            "close": [1, 2],
            "volume": [0, 3],
        }
    )
    out = validate(frame, source="frame")
    assert list(out.columns) == ["timestamp", "ticker", "open", "high", "low", "close", "volume"]
    assert out["timestamp"].iloc[0] == pd.Timestamp("2024-01-02T14:30:00Z")
    assert out["ticker"].tolist() == ["SPY", "SPY"] and out["open"].dtype == "float64"


def test_daily_date_column():
    frame = pd.DataFrame(
        {
            "date": ["2024-01-02", "2024-01-03"],
            "ticker": ["X", "X"],
            "open": [1, 1],
            "high": [1, 1],
            "low": [1, 1],
            "close": [1, 1],
            "volume": [1, 1],
        }
    )
    out = validate(frame)
    assert out["timestamp"].tolist() == [
        pd.Timestamp("2024-01-02", tz="UTC"),
        pd.Timestamp("2024-01-03", tz="UTC"),
    ]
    frame.loc[1, "date"] = "2024/01/03"
    with pytest.raises(DataError, match="row 2, ticker X: date is not YYYY-MM-DD"):
        validate(frame)


# --- the ticker rule -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("spy", "SPY"),
        (" aapl ", "AAPL"),
        ("BRK/B", "BRK.B"),
        ("brk/b", "BRK.B"),
        ("BRK.B", "BRK.B"),
        ("BF-B", "BF-B"),
        ("A", "A"),
        ("1INCH", "1INCH"),
        ("ABCDEFGHIJKLMNO", "ABCDEFGHIJKLMNO"),  # 15 characters: the longest allowed
    ],
)
def test_normalize_ticker_accepts_and_normalizes(raw, expected):
    assert normalize_ticker(raw) == expected
    assert normalize_ticker(expected) == expected  # idempotent


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "../../../../x",
        "../x",
        "./x",
        "x/..",
        "a/b/c",
        "/etc",
        "BRK/",
        "ABCDEFGHIJKLMNOP",  # 16 characters
        "BRK B",
        "SP Y",
        "\u00c4PFEL",
        "\u0410APL",  # a Cyrillic A that looks like a Latin one
        "A\nB",
        "A\x00",
        "-X",
        ".X",
        "A*",
        "A\\B",
    ],
)
def test_normalize_ticker_refuses_in_one_line(raw):
    with pytest.raises(DataError) as err:
        normalize_ticker(raw, source="cli")
    message = str(err.value)
    assert "\n" not in message and "\x00" not in message
    assert message.startswith("cli: ticker ")
    assert message.endswith("empty ticker" if not raw.strip() else TICKER_RULE)


def test_normalize_ticker_refuses_non_text():
    for value in (None, 5, b"SPY"):
        with pytest.raises(DataError, match="is not text"):
            normalize_ticker(value)  # type: ignore[arg-type]


def test_share_class_slash_is_normalized_with_a_note(caplog):
    frame = pd.DataFrame(
        {
            "timestamp": ["2024-01-02T14:30:00Z", "2024-01-02T14:31:00Z", "2024-01-02T14:30:00Z"],
            "ticker": ["brk/b", "BRK/B", "spy"],
            "open": [1.0, 1.0, 1.0],
            "high": [1.0, 1.0, 1.0],
            "low": [1.0, 1.0, 1.0],
            "close": [1.0, 1.0, 1.0],
            "volume": [1, 1, 1],
        }
    )
    with caplog.at_level("INFO", logger="data.schema"):
        out = validate(frame, source="frame")
    assert out["ticker"].tolist() == ["BRK.B", "BRK.B", "SPY"]
    notes = [r.getMessage() for r in caplog.records]
    assert "frame: ticker brk/b is written BRK.B (share classes use '.')" in notes
    assert "frame: ticker BRK/B is written BRK.B (share classes use '.')" in notes
    assert not any("SPY" in n for n in notes)  # upper-casing alone is no news


def test_bad_ticker_in_a_frame_names_the_row_in_one_line():
    frame = pd.DataFrame(
        {
            "timestamp": ["2024-01-02T14:30:00Z", "2024-01-02T14:31:00Z", "2024-01-02T14:32:00Z"],
            "ticker": ["SPY", "a\nb", "\u00e9t\u00e9"],
            "open": [1.0, 1.0, 1.0],
            "high": [1.0, 1.0, 1.0],
            "low": [1.0, 1.0, 1.0],
            "close": [1.0, 1.0, 1.0],
            "volume": [1, 1, 1],
        }
    )
    with pytest.raises(DataError) as err:
        validate(frame, source="frame")
    assert str(err.value) == f"frame: row 2, ticker 'A\\nB': {TICKER_RULE} (and 1 more bad rows)"
    frame.loc[1, "ticker"] = "SPY"
    frame.loc[1, "timestamp"] = "2024-01-02T14:31:00Z"
    with pytest.raises(DataError) as err:
        validate(frame, source="frame")
    assert str(err.value) == f"frame: row 3, ticker '\\xc9T\\xc9': {TICKER_RULE}"


def test_ticker_rule_runs_once_per_distinct_ticker(monkeypatch):
    # Millions of fetched rows, a few hundred tickers: the rule must not cost a Python call per row.
    import data.schema as schema

    n = 5000
    frame = pd.DataFrame(
        {
            "timestamp": pd.date_range("2024-01-02T14:30:00Z", periods=n, freq="min").astype(str),
            "ticker": np.resize(np.array(["aapl", "msft", "brk/b", "nvda"], dtype=object), n),
            "open": 1.0,
            "high": 1.0,
            "low": 1.0,
            "close": 1.0,
            "volume": 1.0,
        }
    )
    calls = []
    real = schema._normalize
    monkeypatch.setattr(schema, "_normalize", lambda value: calls.append(value) or real(value))
    out = validate(frame, source="frame")
    assert sorted(calls) == ["aapl", "brk/b", "msft", "nvda"]
    assert out["ticker"].tolist()[:4] == ["AAPL", "MSFT", "BRK.B", "NVDA"]
