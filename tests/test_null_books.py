"""The null markets' books split by turnover (benchmarks/null_books.py), against hand counts."""

from __future__ import annotations

import json

import pytest

from benchmarks import null_books


def _book(significant: bool, turnover: float) -> dict:
    return {"outcome": "significant" if significant else "not significant", "turnover": turnover}


def _row(seed: int, level: float, champion: dict, start: dict) -> dict:
    return {"shape": "null", "level": level, "seed": seed, "champion": champion, "start": start}


def test_books_are_split_by_turnover_and_pooled_by_market(tmp_path) -> None:
    rows = [
        _row(1, 0.0, _book(True, 0.03), _book(True, 0.03)),  # the zero model's book, both columns
        _row(2, 0.0, _book(False, 0.02), _book(False, 1.5)),
        _row(3, 0.0, _book(False, 0.9), _book(True, 0.8)),
        _row(4, 0.0, _book(False, 0.7), _book(False, 0.05)),
        _row(5, 0.05, _book(True, 0.03), _book(True, 0.03)),  # planted: not a null
    ]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    out = null_books.main([str(tmp_path / "t.jsonl"), "--json"])
    champion, start, pooled = out
    assert champion["column"] == "champion" and champion["nulls"] == 4
    assert (champion["near_equal_weight"]["markets"], champion["near_equal_weight"]["significant"]) == (2, 1)
    assert (champion["other"]["markets"], champion["other"]["significant"]) == (2, 0)
    assert (start["near_equal_weight"]["markets"], start["near_equal_weight"]["significant"]) == (2, 1)
    assert (start["other"]["markets"], start["other"]["significant"]) == (2, 1)
    # by market: markets 1, 2 and 4 have a near-equal-weight book (1 significant: market 1, once);
    # markets 2, 3 and 4 have another (1 significant: market 3)
    assert pooled["nulls"] == 4
    assert (pooled["near_equal_weight"]["markets"], pooled["near_equal_weight"]["significant"]) == (3, 1)
    assert (pooled["other"]["markets"], pooled["other"]["significant"]) == (3, 1)
    assert pooled["near_equal_weight"]["p_at_least"] == pytest.approx(1 - 0.95**3)


def test_the_binomial_figures() -> None:
    assert null_books.p_at_least(0, 10) == 1.0
    assert null_books.p_at_least(2, 100) == pytest.approx(0.9629, abs=1e-4)  # the bagged table's champion
    assert null_books.upper_95(0, 100) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert null_books.upper_95(3, 3) == 1.0


def test_an_unreadable_table_is_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json")
    with pytest.raises(SystemExit, match="null_books: cannot read"):
        null_books.main([str(bad)])
    with pytest.raises(SystemExit):
        null_books.main([str(bad), "--turnover", "0"])
