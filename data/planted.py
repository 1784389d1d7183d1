"""The synthetic market's daily planted shapes: an edge read from past sessions and paid over the next.

``data.synthetic`` plants one of three shapes (``SyntheticSpec.shape``); this module holds the two
that live at the daily horizon, where real anomalies of this kind do (numpy only; no draws of its own:
they reshape the idiosyncratic shocks the generator drew):

- ``daily_cross_section``: short-term **reversal**. Before session ``s``, each name's score is minus
  its idiosyncratic return over the last :data:`REVERSAL_SESSIONS` sessions, in units of its own
  volatility and standardized across the names (mean 0, standard deviation 1 each session);
- ``nonlinear``: an **interaction**. Each name's idiosyncratic return over the previous session's last
  :data:`LAST_BARS` bars (its last hour) and over the bars before them (the rest of that session),
  each in units of the name's volatility and standardized across names, multiplied, and the product
  standardized again: names whose last hour agreed with the rest of their day drift up, names whose
  last hour turned against it drift down. The two inputs are independent and symmetric, so the score
  has zero linear correlation with each of them, and with every feature that is an odd function of
  the returns (``ret_*``, ``rsi``, ``macd``) or depends only on the last hour's magnitudes
  (``vol_60``, ``volume_z``): no linear model of the features can use it, a model of their
  interaction can (``tests/test_data_planted.py`` measures the correlations).

Both pay the drift ``mu[s, a] = kappa * sigma[a] * regime[s] * score[s, a]`` over session ``s``, spread
evenly over its bars: ``sigma[a]`` is the name's daily idiosyncratic volatility (calm regime) and
``regime[s]`` the session's volatility multiplier, so ``kappa`` (``SyntheticSpec.signal`` for these
shapes) is the drift per unit of score in units of the session's idiosyncratic noise. The score of
session ``s`` reads the realized idiosyncratic returns (drifts included) of sessions before ``s`` only.

The planted predictor (what an oracle would trade) at a bar of session ``s`` is ``sigma[a] *
score[s, a]``, the direction of the drift still being paid, except at the session's last bar (its
close), where it is already the next session's: ``sigma[a] * score[s + 1, a]``, which the session's
bars up to that close decide.
"""

from __future__ import annotations

import numpy as np

MINUTE_MOMENTUM = "minute_momentum"
DAILY_CROSS_SECTION = "daily_cross_section"
NONLINEAR = "nonlinear"
SHAPES = (MINUTE_MOMENTUM, DAILY_CROSS_SECTION, NONLINEAR)
DAILY_SHAPES = (DAILY_CROSS_SECTION, NONLINEAR)
#: Sessions of past idiosyncratic return the reversal reads (a week: beyond every window of the small
#: set's features; the library set's ``sret_5d`` and ``zret_5d`` read as far).
REVERSAL_SESSIONS = 5
#: The interaction's "last hour": the previous session's last bars (``vol_60`` / ``ret_60``'s window).
LAST_BARS = 60


def session_bounds(session_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First bar and bar count of each session of a bar grid's ``session_id`` (0, 1, 2, ...)."""
    counts = np.bincount(session_id)
    starts = np.cumsum(counts) - counts
    return starts, counts


def standardized(x: np.ndarray) -> np.ndarray:
    """Each row of ``x`` (one session, across names) to mean 0 and standard deviation 1; a row
    without spread (one name, or all equal) to zeros."""
    centred = x - x.mean(axis=-1, keepdims=True)
    std = centred.std(axis=-1, keepdims=True)
    return np.divide(centred, std, out=np.zeros_like(centred), where=std > 1e-300)


def _reversal_score(past: np.ndarray) -> np.ndarray:
    """Score from ``past (k, A)``: the last ``k <= REVERSAL_SESSIONS`` sessions' idiosyncratic
    returns in volatility units."""
    if len(past) == 0:
        return np.zeros(past.shape[1])
    return standardized(-past.sum(axis=0))


def _interaction_score(last: np.ndarray, rest: np.ndarray) -> np.ndarray:
    """Score from one session's last-hour and rest-of-day returns (``(A,)`` each, volatility units)."""
    return standardized(standardized(last) * standardized(rest))


def daily_drift(
    eps: np.ndarray,
    session_id: np.ndarray,
    sigma: np.ndarray,
    regime: np.ndarray,
    shape: str,
    kappa: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The idiosyncratic returns ``(T, A)`` of ``shape`` (``eps`` plus the planted drift) and the
    scores ``(S + 1, A)`` of each session and of the one after the last (zeros before a session has a
    past). ``eps``: the shocks; ``sigma (A,)``: daily idiosyncratic volatility; ``regime (S,)``.

    Written as a loop over sessions (each step reads the realized returns of the ones before, drift
    included); every step is vectorized over names."""
    starts, counts = session_bounds(session_id)
    num_sessions, num_assets = len(starts), eps.shape[1]
    last_start = starts + np.maximum(counts - LAST_BARS, 0)
    # [start, last_start) and [last_start, next start) alternately: rest of day, last hour.
    sums = np.add.reduceat(eps, np.ravel(np.column_stack([starts, last_start])), axis=0)
    rest_eps, last_eps = sums[0::2], sums[1::2]
    if np.any(last_start == starts):  # a session of fewer than LAST_BARS bars: no rest of day
        rest_eps[last_start == starts] = 0.0
    last_share = (counts - (last_start - starts)) / counts
    score = np.zeros((num_sessions + 1, num_assets))
    returns = np.zeros((num_sessions, num_assets))  # realized idiosyncratic, in volatility units
    last = np.zeros((num_sessions, num_assets))
    mu = np.zeros((num_sessions, num_assets))
    for s in range(num_sessions + 1):
        if s > 0 and shape == DAILY_CROSS_SECTION:
            score[s] = _reversal_score(returns[max(0, s - REVERSAL_SESSIONS) : s])
        elif s > 0 and shape == NONLINEAR:
            score[s] = _interaction_score(last[s - 1], returns[s - 1] - last[s - 1])
        elif s > 0:
            raise ValueError(f"daily_drift: unknown shape {shape!r}")
        if s == num_sessions:
            break
        mu[s] = kappa * sigma * regime[s] * score[s]
        returns[s] = (rest_eps[s] + last_eps[s] + mu[s]) / sigma
        last[s] = (last_eps[s] + last_share[s] * mu[s]) / sigma
    if kappa == 0.0:
        return eps.copy(), score
    return eps + (mu / counts[:, None])[session_id], score


def daily_predictor(score: np.ndarray, session_id: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """``(T, A)``: ``sigma * score`` of the bar's session, and of the next session at each session's
    last bar (see the module's docstring)."""
    starts, counts = session_bounds(session_id)
    which = session_id.copy()
    which[starts + counts - 1] += 1
    return sigma[None, :] * score[which]
