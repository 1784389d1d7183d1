"""Anytime-valid tests of a daily return stream: a betting e-process, valid at any stopping time.

A nightly loop looks at a challenger's record every night and acts the first night a test passes: a
fixed-sample p-value read that way rejects a true null far more often than its level. An e-process
does not: it is a non-negative process ``E_t`` with ``E[E_tau] <= 1`` under the null at every stopping
time ``tau``, so by Ville's inequality ``P(sup_t E_t >= 1 / a) <= a`` (Howard, Ramdas, McAuliffe and
Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist.;
Ramdas, Grünwald, Vovk and Shafer 2023, "Game-theoretic statistics and safe anytime-valid
inference", Statist. Sci.). Checking it every night and stopping the first night it passes keeps the
level.

**The test** (:func:`betting_log_wealth`): H0 ``E[x_t | past] <= 0`` for a daily stream ``x_t`` (a
challenger's excess over the champion or over buy-and-hold). A gambler starts with wealth 1 and each
session stakes a share ``lam_t >= 0``, fixed before the session from earlier sessions only, on
``z_t``, the session's excess in units of ``SCALE_MULTIPLE`` predictable scales, clipped to [-1, 1]:
``W_t = prod_{i <= t} (1 + lam_i z_i)`` (Waudby-Smith and Ramdas 2023, "Estimating means of bounded
random variables by betting", JRSS-B: the betting e-process with the aGRAPA plug-in bet
``lam_t = mean(z) / mean(z^2)`` of the earlier ``z``, shrunk toward 0 by ``PRIOR_SESSIONS`` pseudo
sessions and capped at ``MAX_BET``). Under H0 each factor has conditional mean at most 1, so ``W`` is
a test supermartingale and ``W_t >= 1 / a`` rejects at level ``a`` whenever it happens. Heavy tails
and skew cost no validity where the bet is bounded: the scale ``s_t`` (the standard deviation of the
earlier excess, floored at ``MIN_SCALE``) and the bet use only the past. Clipping the upper tail
only lowers the mean; clipping a loss beyond ``SCALE_MULTIPLE`` scales raises it by the expected
overshoot, the one approximation, which ``benchmarks/anytime_size.py`` measures on Student-t(3),
left-skewed and autocorrelated nulls (figures in docs/benchmarks.md). Under an autocorrelated null
the excess is predictable from its own past; the bet here reads only its running mean, not the
last session, so such a stream's edge is the unconditional mean it tests.

**Many challengers** (:func:`challenger_level`): every challenger ever entered gets a share of the
level, ``a * w_k`` for the ``k``-th entered, with ``sum_k w_k <= 1`` over all time (Bonferroni over
e-processes: the chance that any null challenger ever passes is at most ``a``). The ``k``-th entry
falls in block ``b = (k - 1) // per_block`` of ``per_block`` entries (:data:`ENTRIES_PER_BLOCK`);
block ``b`` shares ``a / 2^(b + 1)`` evenly, so the first ``per_block`` entries each get
``a / (2 * per_block)`` and the level is never spent whatever the loop's lifetime.

**Two comparisons** (:func:`promotion`): a challenger is promoted when both its test against the
champion in charge and its test against buy-and-hold pass at its share of the level: the false
promotion chance is at most the share under either null (an intersection-union test needs no split).

**Demotion** (:func:`demotion_log_wealth`): the champion's own record since promotion against
buy-and-hold, the same e-process on ``margin - x_t``: it passes when the record shows the mean excess
below ``margin`` (the edge gone). Its bet reads the recent sessions (:data:`DEMOTION_BETTING`): the
plug-in's mean and second moment of ``z`` are exponentially discounted sums with a half-life of
``DEMOTION_HALF_LIFE`` sessions. With the running mean of the whole tenure the nights of past edge
must be undone before any stake is placed, so the delay would grow with the tenure; the discounted
bet forgets them. It stays predictable (each weight and sum uses only earlier sessions) and in
``[0, max_bet]``, so each factor ``1 + lam_t z_t`` still has conditional mean at most 1 under H0:
the wealth is a test supermartingale and Ville's bound holds whatever the half-life (the half-life
trades speed for the bet's noise, never validity).

Pure numpy, no torch: the size benchmark runs tens of thousands of streams through these functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Losses are clipped at this many predictable scales (standard deviation of the earlier excess):
#: small enough that a strong edge can be bet on, large enough that a fat or skewed loss tail
#: rarely reaches it (the size benchmark's nulls).
SCALE_MULTIPLE = 4.0
#: Largest share of wealth staked on one session (``z`` in [-1, 1]: a session can take at most this
#: share of the wealth, so one bad session never zeroes it).
MAX_BET = 0.7
#: Sessions observed before the first bet: they set the scale.
WARMUP_SESSIONS = 5
#: Pseudo sessions at mean 0 in the plug-in bet: the first bets stay small until a mean shows.
PRIOR_SESSIONS = 20.0
#: Smallest scale (a daily return): a stream of zeros (a challenger that matched the champion
#: exactly) bets on nothing rather than dividing by 0.
MIN_SCALE = 1e-6
#: The demotion bet's half-life in sessions (:data:`DEMOTION_BETTING`): the champion's recent record,
#: not its whole tenure, sets the stake. Shorter forgets a past edge sooner but bets on fewer
#: sessions' worth of evidence (docs/benchmarks.md, "Shadow book over simulated nightly loops").
DEMOTION_HALF_LIFE = 10.0
#: Pseudo sessions at mean 0 in the demotion bet: fewer than the promotion bet's, since the
#: discounted sums hold only about ``DEMOTION_HALF_LIFE / ln 2`` sessions' worth.
DEMOTION_PRIOR_SESSIONS = 5.0
#: Entries sharing one block of the level (half of it in the first block, a quarter in the next...).
#: A bounded shadow book admits a challenger only when a slot frees, so a year of nights enters far
#: fewer than one a night; a loop that enters more only tests its later ones at a smaller share.
ENTRIES_PER_BLOCK = 64


@dataclass(frozen=True)
class Betting:
    """The betting e-process' settings (the module constants by default)."""

    scale_multiple: float = SCALE_MULTIPLE
    """losses are clipped at this many predictable scales"""
    max_bet: float = MAX_BET
    """largest share of wealth staked on one session, in (0, 1)"""
    warmup_sessions: int = WARMUP_SESSIONS
    """sessions observed before the first bet"""
    prior_sessions: float = PRIOR_SESSIONS
    """pseudo sessions at mean 0 shrinking the plug-in bet"""
    half_life: float | None = None
    """sessions after which a session's weight in the plug-in bet halves (None: every earlier session
    weighs the same, the running mean)"""

    def __post_init__(self) -> None:
        if not 0.0 < self.max_bet < 1.0:
            raise ValueError(f"max_bet must lie in (0, 1), got {self.max_bet}")
        if not self.scale_multiple > 0.0 or self.warmup_sessions < 1 or self.prior_sessions < 0.0:
            raise ValueError("scale_multiple must be > 0, warmup_sessions >= 1, prior_sessions >= 0")
        if self.half_life is not None and not self.half_life > 0.0:
            raise ValueError(f"half_life must be > 0 or None, got {self.half_life}")

    @property
    def discount(self) -> float:
        """Each earlier session's weight in the plug-in bet is multiplied by this per session bet on."""
        return 1.0 if self.half_life is None else 0.5 ** (1.0 / self.half_life)


BETTING = Betting()
#: The demotion e-process' settings: the plug-in bet on exponentially discounted sums.
DEMOTION_BETTING = Betting(half_life=DEMOTION_HALF_LIFE, prior_sessions=DEMOTION_PRIOR_SESSIONS)


def relative_returns(returns: Any, benchmark: Any) -> np.ndarray:
    """Daily excess of ``returns`` over ``benchmark`` in the benchmark's units: ``(1 + r) / (1 + b) - 1``,
    the session's change of the strategy's wealth measured in the benchmark's (its sum over sessions
    is what the log-wealth ratio of the two accounts grows by, to first order)."""
    r = np.asarray(returns, dtype=np.float64)
    b = np.asarray(benchmark, dtype=np.float64)
    return (1.0 + r) / (1.0 + b) - 1.0


def betting_log_wealth(excess: Any, settings: Betting = BETTING) -> np.ndarray:
    """``log W_t`` of the betting e-process of H0 ``E[x_t | past] <= 0`` after each session, for a
    ``(T,)`` stream or ``(T, N)`` streams (one per column); see the module docstring.

    A NaN session (no return recorded) stakes nothing and teaches nothing. Non-decreasing in the
    data's favour only through the bets: the path is whatever the wealth did, so read the test's
    outcome from its running maximum (:func:`first_crossing`), which Ville's inequality bounds.
    """
    x = np.asarray(excess, dtype=np.float64)
    one = x.ndim == 1
    x2 = x.reshape(x.shape[0], -1)
    sessions, streams = x2.shape
    out = np.zeros((sessions, streams))
    seen = np.zeros(streams)  # sessions observed (non-NaN)
    sum_sq = np.zeros(streams)  # of x, for the scale
    sum_x = np.zeros(streams)
    bets_seen = np.zeros(streams)  # sessions bet on
    sum_z = np.zeros(streams)
    sum_z2 = np.zeros(streams)
    log_w = np.zeros(streams)
    prior = settings.prior_sessions
    # A loop over sessions with the streams vectorized: each bet depends on the path before it.
    for t in range(sessions):
        row = x2[t]
        ok = np.isfinite(row)
        active = ok & (seen >= settings.warmup_sessions)
        if active.any():
            n_seen = np.maximum(seen, 1.0)
            variance = np.maximum(sum_sq / n_seen - (sum_x / n_seen) ** 2, 0.0)
            scale = np.maximum(np.sqrt(variance), MIN_SCALE)
            z = np.clip(np.where(active, row, 0.0) / (settings.scale_multiple * scale), -1.0, 1.0)
            mean = sum_z / (bets_seen + prior) if prior > 0 else sum_z / np.maximum(bets_seen, 1.0)
            # Second moment with the prior's pseudo sessions at z^2 = 1 / scale_multiple^2 (a
            # session of one scale): the first bets are not inflated by a lucky calm start.
            second = (sum_z2 + prior / settings.scale_multiple**2) / np.maximum(bets_seen + prior, 1.0)
            bet = np.clip(mean / np.maximum(second, 1e-12), 0.0, settings.max_bet)
            bet = np.where(active, bet, 0.0)
            log_w = log_w + np.log1p(bet * z)
            # The bet's sums, discounted where a half-life is set (after the bet: still the past only).
            keep = np.where(active, settings.discount, 1.0)
            sum_z = sum_z * keep + np.where(active, z, 0.0)
            sum_z2 = sum_z2 * keep + np.where(active, z * z, 0.0)
            bets_seen = bets_seen * keep + active
        sum_sq = sum_sq + np.where(ok, row * row, 0.0)
        sum_x = sum_x + np.where(ok, row, 0.0)
        seen = seen + ok
        out[t] = log_w
    return out[:, 0] if one else out.reshape(x.shape)


def demotion_log_wealth(excess: Any, margin: float = 0.0, settings: Betting | None = None) -> np.ndarray:
    """``log W_t`` of the demotion test: H0 ``E[x_t | past] >= margin`` (the champion still earns at
    least ``margin`` a day over its benchmark), the betting e-process on ``margin - x_t`` with the
    discounted bet of :data:`DEMOTION_BETTING` where ``settings`` is None (see the module docstring)."""
    settings = DEMOTION_BETTING if settings is None else settings
    return betting_log_wealth(float(margin) - np.asarray(excess, dtype=np.float64), settings)


def challenger_level(level: float, entry: int, per_block: int = ENTRIES_PER_BLOCK) -> float:
    """The share of the level ``a`` the ``entry``-th challenger ever entered (1-based) is tested at:
    ``a / (2^(b + 1) per_block)`` with ``b = (entry - 1) // per_block``; the shares of all entries sum
    to ``a`` (see the module docstring)."""
    if entry < 1 or per_block < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"entry {entry} and per_block {per_block} must be >= 1, level in (0, 1)")
    block = (entry - 1) // per_block
    return level / (2.0 ** (block + 1) * per_block)


def log_threshold(level: float) -> float:
    """``log(1 / level)``: the log-wealth at which a test at ``level`` rejects (Ville's inequality)."""
    return -math.log(level)


def first_crossing(log_wealth: Any, level: float) -> np.ndarray:
    """Index of the first session whose log-wealth reaches ``log(1 / level)`` (per column), -1 where
    none does. ``level`` a number or one per column."""
    lw = np.asarray(log_wealth, dtype=np.float64)
    one = lw.ndim == 1
    lw2 = lw.reshape(lw.shape[0], -1)
    hit = lw2 >= -np.log(np.broadcast_to(np.asarray(level, dtype=np.float64), lw2.shape[1:]))
    first = np.where(hit.any(axis=0), hit.argmax(axis=0), -1)
    return first[0] if one else first


@dataclass(frozen=True)
class Evidence:
    """Where a challenger's two tests stand: log-wealth against the champion in charge and against
    buy-and-hold, the share of the level it is tested at and the sessions seen."""

    log_wealth_champion: float
    log_wealth_benchmark: float
    level: float
    sessions: int

    @property
    def e_values(self) -> tuple[float, float]:
        """The two e-values (wealth), against the champion and against buy-and-hold."""
        return math.exp(self.log_wealth_champion), math.exp(self.log_wealth_benchmark)

    @property
    def passes(self) -> bool:
        """Both tests reject at :attr:`level` (see :func:`promotion`)."""
        return promotion(self.log_wealth_champion, self.log_wealth_benchmark, self.level)


def promotion(log_wealth_champion: float, log_wealth_benchmark: float, level: float) -> bool:
    """Promote: the e-processes against the champion and against buy-and-hold both reached ``1 / level``
    (an intersection-union test: at most ``level`` under either null)."""
    bar = log_threshold(level)
    return log_wealth_champion >= bar and log_wealth_benchmark >= bar
