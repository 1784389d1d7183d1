"""The fold layout of a walk-forward: which sessions each fold trains, selects and trades on.

Pure arithmetic on session indices (standard library only). A fold ``k`` is the replay of one
retraining: its tournament trains on ``train`` and ranks pods on ``valid``, the gate compares its
challenger with the incumbent on ``gate`` (the validation window itself, or with ``gate_sessions`` the
sessions after it, as nightly retraining gates on a window its tournament did not rank on), and the
policy in charge after the gate trades ``test``. Every window is a half-open range ``[start,
stop)`` of 0-based session indices into the loaded market::

    rolling, train 6, valid 3, embargo 1, step 2 (t = train, v = valid, e = embargo, T = test)

    session   0 1 2 3 4 5 6 7 8 9 10 11 12 13 14
    fold 0    t t t t t t v v v e T  T
    fold 1        t t t t t t v v v  e  T  T
    fold 2            t t t t t t v  v  v  e  T

- test windows follow each other without gap or overlap (``step_sessions`` long; the last one may be
  shorter, where the data ends), so the tests tile one continuous out-of-sample span;
- the gate's window ends ``embargo_sessions`` (at least one) sessions before ``test`` starts: it never
  touches the days the account trades, and the overnight move between them belongs to neither;
- ``rolling``: ``train`` is the ``train_sessions`` sessions before ``valid``; ``expanding``: it starts
  at session 0 and grows by ``step_sessions`` each fold;
- the first test window starts at ``first_test`` (default: as early as train + valid + gate + embargo
  fit).

>>> [f.test for f in fold_layout(15, train_sessions=6, valid_sessions=3, step_sessions=2)]
[(10, 12), (12, 14), (14, 15)]
>>> fold_layout(15, train_sessions=6, valid_sessions=3, step_sessions=2, window="expanding")[2].train
(0, 10)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from data.errors import ConfigError

Window = Literal["rolling", "expanding"]
WINDOWS: tuple[str, ...] = ("rolling", "expanding")
#: Sessions between the gate's last day and the account's first: at least one, so no bar of the
#: validation window is adjacent to a traded bar.
MIN_EMBARGO_SESSIONS = 1


@dataclass(frozen=True)
class Fold:
    """One fold: half-open session ranges ``[start, stop)`` of its windows."""

    index: int
    train: tuple[int, int]
    valid: tuple[int, int]
    test: tuple[int, int]
    gate: tuple[int, int] | None = None  # None: the gate reads the validation window

    @property
    def gate_window(self) -> tuple[int, int]:
        """The sessions the gate compares challenger and incumbent on."""
        return self.gate if self.gate is not None else self.valid

    @property
    def embargo(self) -> tuple[int, int]:
        """The sessions between the gate's window and ``test`` (traded by no one, selected on by no one)."""
        return (self.gate_window[1], self.test[0])

    @property
    def start(self) -> int:
        """First session the fold reads (its train window's first)."""
        return self.train[0]

    @property
    def stop(self) -> int:
        """One past the fold's last session (its test window's last)."""
        return self.test[1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (lists for the ranges)."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        out["gate"] = list(self.gate_window)
        out["embargo"] = list(self.embargo)
        return out


def fold_layout(
    num_sessions: int,
    *,
    train_sessions: int,
    valid_sessions: int,
    step_sessions: int,
    embargo_sessions: int = MIN_EMBARGO_SESSIONS,
    gate_sessions: int = 0,
    window: str = "rolling",
    first_test: int | None = None,
    max_folds: int | None = None,
) -> list[Fold]:
    """The folds of a walk-forward over ``num_sessions`` sessions (see the module docstring).

    Raises a one-line ``ConfigError`` when a setting is out of range or the data holds no fold.
    """
    for name, value in (
        ("train_sessions", train_sessions),
        ("valid_sessions", valid_sessions),
        ("step_sessions", step_sessions),
    ):
        if value < 1:
            raise ConfigError(f"walkforward.{name} must be >= 1 (got {value})")
    if embargo_sessions < MIN_EMBARGO_SESSIONS:
        raise ConfigError(
            f"walkforward.embargo_sessions must be >= {MIN_EMBARGO_SESSIONS} (got {embargo_sessions}): "
            "the validation window may not touch the traded sessions"
        )
    if gate_sessions < 0:
        raise ConfigError(f"walkforward.gate_sessions must be >= 0 (got {gate_sessions})")
    if window not in WINDOWS:
        raise ConfigError(f"walkforward.window must be one of {', '.join(WINDOWS)} (got {window!r})")
    if max_folds is not None and max_folds < 1:
        raise ConfigError(f"walkforward.num_folds must be >= 1 (got {max_folds})")
    earliest = train_sessions + valid_sessions + gate_sessions + embargo_sessions
    start = earliest if first_test is None else first_test
    if start < earliest:
        raise ConfigError(
            f"the first test session ({start}) leaves {start} sessions before it; train + valid + gate + "
            f"embargo need {earliest}"
        )
    if start >= num_sessions:
        raise ConfigError(
            f"{num_sessions} sessions hold no fold: the first test session would be {start} "
            f"(train {train_sessions} + valid {valid_sessions} + embargo {embargo_sessions})"
        )
    folds: list[Fold] = []
    test_start = start
    while test_start < num_sessions and (max_folds is None or len(folds) < max_folds):
        gate_stop = test_start - embargo_sessions
        valid_stop = gate_stop - gate_sessions
        valid_start = valid_stop - valid_sessions
        train_start = 0 if window == "expanding" else valid_start - train_sessions
        folds.append(
            Fold(
                index=len(folds),
                train=(train_start, valid_start),
                valid=(valid_start, valid_stop),
                test=(test_start, min(test_start + step_sessions, num_sessions)),
                gate=(valid_stop, gate_stop) if gate_sessions else None,
            )
        )
        test_start += step_sessions
    return folds


def span(folds: list[Fold]) -> tuple[int, int]:
    """The sessions the stitched account trades: the first fold's test start to the last's stop."""
    if not folds:
        raise ConfigError("a walk-forward needs at least one fold")
    return folds[0].test[0], folds[-1].test[1]


def fold_of_session(folds: list[Fold], session: int) -> Fold | None:
    """The fold whose test window holds ``session`` (None outside the span)."""
    for fold in folds:
        if fold.test[0] <= session < fold.test[1]:
            return fold
    return None
