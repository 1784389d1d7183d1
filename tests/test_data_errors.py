"""data.errors.one_line: how any exception is quoted inside a one-line message."""

from __future__ import annotations

import pytest

from data.errors import ConfigError, DataError, one_line


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (ValueError("bad value\nsecond line"), "ValueError: bad value"),  # a foreign error names its type
        (KeyError("x"), "KeyError: 'x'"),
        (RuntimeError(""), "RuntimeError"),  # no text: the type alone
        (OSError("  padded  \n"), "OSError: padded"),
        (DataError("no bars for AAPL\ndetail"), "no bars for AAPL"),  # ours are written for the user
        (ConfigError(""), ""),
    ],
)
def test_one_line(err, expected):
    assert one_line(err) == expected


def test_one_line_limit_cuts_a_long_reply():
    text = "x" * 500
    assert one_line(ValueError(text), limit=200) == "ValueError: " + "x" * 200
    assert one_line(ValueError(text)) == "ValueError: " + text


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (ValueError("bad value\nsecond line"), "bad value"),  # the text alone
        (RuntimeError(""), "RuntimeError"),  # still the type when there is no text
        (ConfigError(""), "ConfigError"),
        (DataError("no bars"), "no bars"),
    ],
)
def test_one_line_untyped(err, expected):
    assert one_line(err, typed=False) == expected
