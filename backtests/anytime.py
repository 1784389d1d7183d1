"""Anytime-valid tests of a daily return stream: a betting e-process, valid at any stopping time.

A nightly loop looks at a challenger's record every night and acts the first night a test passes: a
fixed-sample p-value read that way rejects a true null far more often than its level. An e-process
does not: it is a non-negative process ``E_t`` with ``E[E_tau] <= 1`` under the null at every stopping
time ``tau``, so by Ville's inequality ``P(sup_t E_t >= 1 / a) <= a`` (Howard, Ramdas, McAuliffe and
Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist.;
Ramdas, Grünwald, Vovk and Shafer 2023, "Game-theoretic statistics and safe anytime-valid
inference", Statist. Sci.). Checking it every night and stopping the first night it passes keeps the
level.

**What is tested** (:func:`alpha_excess`): a strategy's daily alpha over buy-and-hold with a
predictable beta, ``x_t = r_t - beta_t b_t``, ``beta_t`` the regression slope of the sessions before
``t`` shrunk toward 1 by ``BETA_PRIOR_SESSIONS`` pseudo sessions: the quantity the verdict of
``podracer backtest`` tests (its alpha), so a promotion and the report speak of one number, and a
strategy with beta 1.5 and no alpha is not promoted for the market's drift.

**The test** (:func:`betting_log_wealth`): H0 ``E[x_t | past] <= 0``. Each session a bet
``lam_t >= 0``, fixed from earlier sessions only, multiplies the wealth by
``exp(phi(lam_t x_t) - lam_t^2 v_t / 2)``, with Catoni's influence function ``phi(y) = log(1 + y +
y^2/2)`` for ``y >= 0`` and ``-log(1 - y + y^2/2)`` below (Catoni 2012; Wang and Ramdas 2023,
"Catoni-style confidence sequences for heavy-tailed mean estimation", Stoch. Proc. Appl.). Since
``exp(phi(y)) <= 1 + y + y^2/2`` for every real ``y``, each factor has conditional mean at most 1
whenever the session's mean is at most 0 and its second moment at most ``v_t``: no clipping, so a
large loss counts in full (it costs the wealth a logarithm, never biases the mean as a clipped loss
did), whatever the skew. ``v_t`` is the running second moment of the earlier sessions times
``variance_inflation``, raised where the record is left-skewed (by ``skew_inflation`` times the
negative skewness over ``sqrt(n)``: a rare large loss not yet seen) and where its lag-1
autocorrelation is positive beyond ``autocorrelation_margin`` standard errors (to the AR(1) long-run
variance ``(1 + rho) / (1 - rho)``: the drift one session lends the next); the bet is ``shrink`` times the plug-in Kelly bet ``mean / v_t`` of the
sessions up to ``bet_lag`` before (the mean shrunk toward 0 by ``prior_sessions`` pseudo sessions),
capped at ``max_bet / sqrt(v_t)``.

**The assumption, in one sentence**: a session's alpha has mean at most 0 given the past and a second
moment no larger than ``v_t``, the earlier sessions' average raised for their skew and
autocorrelation. Heavy tails, skew and volatility clustering break it only where a calm stretch
under-states what follows, and autocorrelation only through the drift it lends the next session; the
raises, the 0.7-Kelly bet and the one-session lag absorb the measured cases (``benchmarks/anytime_size.py``: Student-t(3),
lognormal skew -6, ``-(Exp(1) - 1)``, AR(1) 0.2 and 0.4, GARCH(1,1), beta 1.5; figures in
docs/benchmarks.md). A stream that earns a little every day and loses a lot rarely (carry and crash)
is the case no test of the mean can promise before the crash is seen: it is reported beside them.

**Many challengers** (:func:`challenger_level`): every challenger ever entered gets a share of the
level, ``a * w_k`` for the ``k``-th entered, with ``sum_k w_k <= 1`` over all time (Bonferroni over
e-processes: the chance that any null challenger ever passes is at most ``a``). The ``k``-th entry
falls in block ``b = (k - 1) // per_block`` of ``per_block`` entries (:data:`ENTRIES_PER_BLOCK`);
block ``b`` shares ``a / 2^(b + 1)`` evenly, so the first ``per_block`` entries each get
``a / (2 * per_block)`` and the level is never spent whatever the loop's lifetime.

**Two comparisons** (:func:`promotion`): a challenger is promoted when both its test against the
champion in charge (the difference of the two alphas) and its test against buy-and-hold (its alpha)
pass at its share of the level: the false promotion chance is at most the share under either null
(an intersection-union test needs no split).

**Demotion** (:func:`demotion_log_wealth`): the champion's own alpha since promotion, the same
e-process on ``margin - x_t``: it passes when the record shows the mean alpha below ``margin`` (the
edge gone). Its bet reads the recent sessions (:data:`DEMOTION_BETTING`): the plug-in's mean is an
exponentially discounted sum with a half-life of ``DEMOTION_HALF_LIFE`` sessions, so the nights of
past edge need not be undone before a stake is placed. It stays predictable and non-negative, so the
wealth keeps its conditional mean whatever the half-life (the half-life trades speed for the bet's
noise, never validity).

Pure numpy, no torch: the size benchmark runs tens of thousands of streams through these functions.
The ``expectation`` package (e-values and e-processes) was read first: its mean tests take one stream
at a time and assume bounded or Gaussian data, while this test runs sessions x streams arrays at once
under the weaker assumption above, hence the hand-written loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Sessions observed before the first bet: they set the scale.
WARMUP_SESSIONS = 5
#: Pseudo sessions at mean 0 in the plug-in bet: the first bets stay small until a mean shows.
PRIOR_SESSIONS = 20.0
#: Share of the plug-in Kelly bet staked: a smaller bet is less exposed to an under-stated scale.
SHRINK = 0.7
#: The second moment the compensator charges, as a multiple of the earlier sessions' average.
VARIANCE_INFLATION = 1.2
#: Largest bet in units of ``1 / sqrt(v_t)``.
MAX_BET = 2.0
#: Sessions between the last one the bet's mean reads and the one it stakes on (1: not yesterday's,
#: so a null stream's drift from one session to the next does not feed its own bet).
BET_LAG = 1
#: How much a left-skewed record raises the second moment: ``1 + SKEW_INFLATION * max(0, -skewness) /
#: sqrt(n)`` (a record that has not yet shown its rare large loss under-states its second moment; the
#: raise fades as sessions accumulate).
SKEW_INFLATION = 3.0
#: Lag-1 autocorrelation within this many standard errors (``1 / sqrt(n)``) of 0 is taken as noise;
#: beyond it the second moment is raised to the AR(1) long-run variance ``(1 + rho) / (1 - rho)``.
AUTOCORRELATION_MARGIN = 1.0
#: Smallest second moment (a daily return squared): a stream of zeros bets on nothing.
MIN_SECOND_MOMENT = 1e-12
#: Pseudo sessions at beta 1 in the predictable beta (:func:`alpha_excess`).
BETA_PRIOR_SESSIONS = 20.0
#: Sessions recorded before the predictable beta leaves 1, and the range it is kept in.
BETA_WARMUP_SESSIONS = 10
BETA_RANGE = (-1.0, 3.0)
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

    shrink: float = SHRINK
    """share of the plug-in Kelly bet staked, in (0, 1]"""
    variance_inflation: float = VARIANCE_INFLATION
    """the compensator's second moment over the earlier sessions' average, at least 1"""
    max_bet: float = MAX_BET
    """largest bet in units of 1 / sqrt(v_t)"""
    warmup_sessions: int = WARMUP_SESSIONS
    """sessions observed before the first bet"""
    prior_sessions: float = PRIOR_SESSIONS
    """pseudo sessions at mean 0 shrinking the plug-in bet"""
    bet_lag: int = BET_LAG
    """sessions between the last one the bet reads and the one it stakes on"""
    skew_inflation: float = SKEW_INFLATION
    """the second moment's raise per unit of the record's negative skewness, over sqrt(sessions)"""
    autocorrelation_margin: float = AUTOCORRELATION_MARGIN
    """standard errors of lag-1 autocorrelation ignored before the second moment is raised for it"""
    half_life: float | None = None
    """sessions after which a session's weight in the plug-in mean halves (None: every earlier session
    weighs the same, the running mean)"""

    def __post_init__(self) -> None:
        if not 0.0 < self.shrink <= 1.0 or not self.variance_inflation >= 1.0 or not self.max_bet > 0.0:
            raise ValueError("shrink must lie in (0, 1], variance_inflation >= 1 and max_bet > 0")
        if self.skew_inflation < 0.0 or self.autocorrelation_margin < 0.0:
            raise ValueError("skew_inflation and autocorrelation_margin must be >= 0")
        if self.warmup_sessions < 1 or self.prior_sessions < 0.0 or self.bet_lag < 0:
            raise ValueError("warmup_sessions must be >= 1, prior_sessions >= 0 and bet_lag >= 0")
        if self.half_life is not None and not self.half_life > 0.0:
            raise ValueError(f"half_life must be > 0 or None, got {self.half_life}")

    @property
    def discount(self) -> float:
        """Each earlier session's weight in the plug-in mean is multiplied by this per session."""
        return 1.0 if self.half_life is None else 0.5 ** (1.0 / self.half_life)


BETTING = Betting()
#: The demotion e-process' settings: the plug-in bet on exponentially discounted sums.
#: The full plug-in bet: a false demotion hands the account to buy-and-hold, a slow one keeps a losing
#: champion in charge, so demotion trades the promotion bet's margin for speed. No raise for
#: autocorrelation: the change of mean demotion looks for reads as autocorrelation over the tenure.
DEMOTION_BETTING = Betting(
    half_life=DEMOTION_HALF_LIFE,
    prior_sessions=DEMOTION_PRIOR_SESSIONS,
    shrink=1.0,
    autocorrelation_margin=math.inf,
)


def catoni(y: np.ndarray) -> np.ndarray:
    """Catoni's influence function: ``log(1 + y + y^2/2)`` for ``y >= 0``, ``-log(1 - y + y^2/2)``
    below; ``exp(catoni(y)) <= 1 + y + y^2/2`` for every real ``y``."""
    y = np.asarray(y, dtype=np.float64)
    a = np.abs(y)
    return np.sign(y) * np.log1p(a + 0.5 * a * a)


def _columns(values: Any) -> tuple[np.ndarray, bool]:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 0:
        return x.reshape(1, 1), False
    return (x[:, None] if x.ndim == 1 else x.reshape(x.shape[0], -1)), x.ndim == 1


def alpha_excess(returns: Any, benchmark: Any, prior_sessions: float = BETA_PRIOR_SESSIONS) -> np.ndarray:
    """``r_t - beta_t b_t`` per session (``(T,)`` or ``(T, N)``, NaN where either is missing), with the
    predictable beta ``beta_t = (sum r b + p m) / (sum b^2 + p m)`` over the earlier sessions where both
    are recorded, ``p = prior_sessions`` pseudo sessions at beta 1 and ``m`` the earlier sessions' mean
    ``b^2`` (beta 1 before ``BETA_WARMUP_SESSIONS`` sessions, kept in ``BETA_RANGE``): the daily alpha
    the verdict tests, with no session's beta reading that session."""
    r, one = _columns(returns)
    b, _ = _columns(benchmark)
    r, b = np.broadcast_arrays(r, b)
    ok = np.isfinite(r) & np.isfinite(b)
    rb = np.where(ok, r * b, 0.0)
    bb = np.where(ok, b * b, 0.0)
    # Sums of the sessions before t: a cumulative sum shifted by one.
    zero = np.zeros((1, r.shape[1]))
    s_rb = np.concatenate([zero, np.cumsum(rb, axis=0)[:-1]])
    s_bb = np.concatenate([zero, np.cumsum(bb, axis=0)[:-1]])
    n = np.concatenate([zero, np.cumsum(ok, axis=0)[:-1]])
    prior = prior_sessions * s_bb / np.maximum(n, 1.0)
    beta = np.where(s_bb + prior > 0.0, (s_rb + prior) / np.maximum(s_bb + prior, 1e-300), 1.0)
    # A slope read off a handful of sessions can be anything (one quiet market day divides by ~0):
    # beta 1 until BETA_WARMUP_SESSIONS are recorded, and never outside BETA_RANGE.
    beta = np.where(n >= BETA_WARMUP_SESSIONS, np.clip(beta, *BETA_RANGE), 1.0)
    out = np.where(ok, r - beta * b, np.nan)
    return out[:, 0] if one else out


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

    A NaN session (no return recorded) stakes nothing and teaches nothing. The path is whatever the
    wealth did: read the test's outcome from its running maximum (:func:`first_crossing`), which
    Ville's inequality bounds.
    """
    x2, one = _columns(excess)
    sessions, streams = x2.shape
    out = np.zeros((sessions, streams))
    moments = _Moments(streams)
    bet_sum = np.zeros(streams)  # the plug-in mean's (discounted) sum and weight, lagged
    bet_weight = np.zeros(streams)
    lagged: list[tuple[np.ndarray, np.ndarray]] = []
    log_w = np.zeros(streams)
    s = settings
    # A loop over sessions with the streams vectorized: each bet depends on the path before it.
    for t in range(sessions):
        row = x2[t]
        ok = np.isfinite(row)
        value = np.where(ok, row, 0.0)
        active = ok & (moments.seen >= s.warmup_sessions)
        if active.any():
            second = moments.second_moment(s)
            mean = bet_sum / np.maximum(bet_weight + s.prior_sessions, 1.0)
            bet = np.clip(s.shrink * mean / second, 0.0, s.max_bet / np.sqrt(second))
            bet = np.where(active, bet, 0.0)
            log_w = log_w + np.where(active, catoni(bet * value) - 0.5 * bet * bet * second, 0.0)
        lagged.append((ok, value))
        if len(lagged) > s.bet_lag:
            was_ok, was = lagged.pop(0)
            keep = np.where(was_ok, s.discount, 1.0)
            bet_sum = bet_sum * keep + was
            bet_weight = bet_weight * keep + was_ok
        moments.add(ok, value)
        out[t] = log_w
    return out[:, 0] if one else out


class _Moments:
    """Running sums of the sessions seen so far (per stream) and the second moment the compensator
    charges (:meth:`second_moment`)."""

    def __init__(self, streams: int) -> None:
        self.seen = np.zeros(streams)
        self.s1, self.s2, self.s3 = np.zeros(streams), np.zeros(streams), np.zeros(streams)
        self.lag1 = np.zeros(streams)  # sum of x_t x_{t-1} over consecutive recorded sessions
        self.pairs = np.zeros(streams)
        self.last = np.full(streams, np.nan)

    def add(self, ok: np.ndarray, value: np.ndarray) -> None:
        pair = ok & np.isfinite(self.last)
        self.lag1 += np.where(pair, value * np.nan_to_num(self.last), 0.0)
        self.pairs += pair
        self.last = np.where(ok, value, self.last)
        self.s1 += value
        self.s2 += value * value
        self.s3 += value * value * value
        self.seen += ok

    def second_moment(self, s: Betting) -> np.ndarray:
        """``variance_inflation`` times the average ``x^2``, raised where the record is left-skewed
        (``1 + skew_inflation * max(0, -skewness) / sqrt(n)``: a rare large loss not yet seen leaves
        the average short of the true second moment) and where it is positively autocorrelated beyond
        ``autocorrelation_margin`` standard errors (``(1 + rho) / (1 - rho)``, the long-run variance of
        an AR(1) stream: the drift one session lends the next)."""
        n = np.maximum(self.seen, 1.0)
        m1, m2, m3 = self.s1 / n, self.s2 / n, self.s3 / n
        spread = m2 - m1 * m1
        # A record with no spread (a constant stream) has no skewness or autocorrelation to read.
        varies = spread > 1e-9 * np.maximum(m2, MIN_SECOND_MOMENT)
        variance = np.where(varies, spread, 1.0)
        skew = np.where(varies, (m3 - 3.0 * m1 * m2 + 2.0 * m1**3) / variance**1.5, 0.0)
        factor = 1.0 + s.skew_inflation * np.maximum(-skew, 0.0) / np.sqrt(n)
        lag1 = np.where(varies, (self.lag1 / np.maximum(self.pairs, 1.0) - m1 * m1) / variance, 0.0)
        rho = np.clip(lag1 - s.autocorrelation_margin / np.sqrt(np.maximum(self.pairs, 1.0)), 0.0, 0.9)
        factor = factor * (1.0 + rho) / (1.0 - rho)
        return s.variance_inflation * factor * np.maximum(m2, MIN_SECOND_MOMENT)


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


def alpha_difference(returns: Any, in_charge: Any, benchmark: Any) -> np.ndarray:
    """The challenger's alpha over buy-and-hold minus the in-charge's (:func:`alpha_excess` of each,
    with its own predictable beta): 0 for an in-charge that is buy-and-hold itself."""
    return alpha_excess(returns, benchmark) - alpha_excess(in_charge, benchmark)
