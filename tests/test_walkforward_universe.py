"""The walk-forward's universe as of each fold: a fold trades the index members on its own dates whose
bars cover ``min_coverage`` of its own train window (``data.fold_market.fold_universe``), on a market
loaded with every candidate of the span (``load_market(per_window=True)``); nothing after a fold's
test window decides what it trades."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from app.config import parse_config
from app.walkforward.account import StitchedAccount
from app.walkforward.plan import plan_folds
from app.walkforward.run import bars_only
from data.calendar import sessions_in_range
from data.fold_market import fold_market
from data.loader import load_market
from data.store import BarStore
from envs.trading import EnvParams
from tests.alpaca_fake import minute_bars

pytestmark = pytest.mark.usefixtures("one_thread")

# Fold k: train sessions [3k, 3k + 5), validation 10, embargo 1, test [16 + 3k, 19 + 3k).
LAYOUT = {"train_sessions": 5, "valid_sessions": 10, "gate_sessions": 0, "step_sessions": 3}
NUM_SESSIONS = 40


def _bars(ticker: str, days: pd.DatetimeIndex, sessions: range) -> pd.DataFrame:
    """Complete minute bars of ``ticker`` on ``days[sessions]`` (one range of consecutive sessions)."""
    first, last = days[sessions.start], days[sessions.stop - 1]
    return minute_bars([ticker], first, last + pd.Timedelta(days=1), missing=0.0)


def _store(home, parts: list[tuple[str, range]], days: pd.DatetimeIndex) -> None:
    BarStore(home).write(
        pd.concat([_bars(t, days, r) for t, r in parts], ignore_index=True), "1m", source="test"
    )


def _walkforward(home, **data):
    config = parse_config({"data": {"source": "stored", **data}, "walkforward": LAYOUT})
    full = bars_only(load_market(config.data, home=home, per_window=True).full)
    plans = plan_folds(full, config.walkforward)
    account = StitchedAccount(
        full, plans, EnvParams(), torch.device("cpu"), min_coverage=config.data.min_coverage
    )
    for plan in plans:
        account.add(plan, None)
    return full, plans, account


def _traded(full, plan) -> set[str]:
    fold = fold_market(
        full, plan.bars["train"][0], plan.bars["test"][1], fit=plan.bars["train"], min_coverage=0.5
    )
    return {t for t, inside in zip(full.tickers, fold.universe.tolist(), strict=True) if inside}


def test_bars_after_fold_0s_test_window_do_not_change_what_fold_0_trades(tmp_path):
    """DDD has bars on fold 0's train and test sessions only (8 of the loader's 24 judged sessions:
    dropped by a span-wide coverage rule); CCC's bars start after fold 0's test window. Appending bars
    after fold 0's test window (DDD's later sessions, all of CCC) changes nothing about fold 0: its
    dates, its tickers, its normalization."""
    days = sessions_in_range("2024-01-02", "2024-04-30")[:NUM_SESSIONS]
    base = [("AAA", range(0, 40)), ("BBB", range(0, 40)), ("DDD", range(0, 5)), ("DDD", range(16, 19))]
    _store(tmp_path / "a", base, days)
    _store(tmp_path / "b", [*base, ("DDD", range(19, 40)), ("CCC", range(19, 40))], days)
    seen = {}
    for name in ("a", "b"):
        full, plans, account = _walkforward(tmp_path / name)
        fold = fold_market(full, plans[0].bars["train"][0], plans[0].bars["test"][1], fit=plans[0].bars["train"],
                           min_coverage=0.5)  # fmt: skip
        seen[name] = (plans[0].windows(), _traded(full, plans[0]), fold.spec["mean"], fold.spec["std"])
        test = slice(*plans[0].bars["test"])
        ddd = full.tickers.index("DDD")
        assert bool(full.tradable[test, ddd].all())  # real bars in fold 0's test window: traded there
        rows = slice(0, plans[0].bars["test"][1] - plans[0].bars["test"][0])
        assert bool(account.market().tradable[rows, ddd].all())
        # Fold 1's train window [3, 8) holds 2 DDD sessions (under 50%): fold 1 does not trade it,
        # and the stitched account sells what fold 0 left in it (never listed again in fold 1).
        assert "DDD" not in _traded(full, plans[1])
        rows = slice(*(b - plans[0].bars["test"][0] for b in plans[1].bars["test"]))
        assert not bool(account.market().tradable[rows, ddd].any())
        assert not bool(account.market().listed[rows, ddd].any())
    assert seen["a"] == seen["b"]
    assert seen["a"][1] == {"AAA", "BBB", "DDD"}
    # CCC enters the first fold whose train window it covers: fold 6, train [18, 23), 4 of 5 sessions.
    full, plans, account = _walkforward(tmp_path / "b")
    entered = [k for k, plan in enumerate(plans) if "CCC" in _traded(full, plan)]
    assert entered == list(range(6, len(plans))) and len(plans) == 8
    ccc = full.tickers.index("CCC")
    rows = slice(*(b - plans[0].bars["test"][0] for b in plans[6].bars["test"]))
    assert bool(account.market().tradable[rows, ccc].all())
    before = slice(0, plans[6].bars["test"][0] - plans[0].bars["test"][0])
    assert not bool(account.market().tradable[before, ccc].any())


def test_a_later_index_joiner_is_traded_once_its_train_window_covers_it(tmp_path):
    """ARM joined the NASDAQ-100 on 2024-06-24 (shipped history). With bars stored from June 3, a
    walk-forward from 2024-06-03 loads it beside the members of its first day; folds whose train
    window ends before the join do not trade it, the first one whose train window has it as a member
    on 50% of the sessions does, from its own test window on."""
    days = sessions_in_range("2024-06-03", "2024-09-30")[:NUM_SESSIONS]
    _store(tmp_path, [(t, range(0, NUM_SESSIONS)) for t in ("AAPL", "MSFT", "ARM")], days)
    full, plans, account = _walkforward(tmp_path, universe="nasdaq100", as_of="2024-06-03")
    assert set(full.tickers) == {"AAPL", "MSFT", "ARM"}
    join = int(days.searchsorted(pd.Timestamp("2024-06-24")))
    arm = full.tickers.index("ARM")
    for k, plan in enumerate(plans):
        train_members = sum(join <= s for s in range(*plan.fold.train))
        assert ("ARM" in _traded(full, plan)) == (train_members >= 3), k
        assert {"AAPL", "MSFT"} <= _traded(full, plan)
    first = next(k for k, plan in enumerate(plans) if "ARM" in _traded(full, plan))
    assert first == 4 and len(plans) == 8  # train [12, 17): the join is session 14
    offset = plans[0].bars["test"][0]
    rows = slice(plans[first].bars["test"][0] - offset, plans[-1].bars["test"][1] - offset)
    assert bool(account.market().tradable[rows, arm].all())
    assert not bool(account.market().tradable[: rows.start, arm].any())
