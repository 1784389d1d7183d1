"""The ``library`` feature set's additions: session-level, volume and cross-sectional features in torch.

In the spirit of Qlib's Alpha158, on top of the ``small`` set's eight bar features (``data.features``).
Everything is vectorized over ``(time, tickers)`` on any device (``cumsum``, ``cummax``, ``unfold``,
``sort``/``searchsorted``); the only Python loops run over feature definitions and asset blocks,
never over bars. The value at bar ``t`` uses bars ``<= t`` only (a test changes later bars and checks
every earlier value is bit-identical).

Sessions are read from ``session_id (T,)`` (a change of id starts a session); a bar's position in its
session is counted from the session's first bar in the data. Per session ``s``: ``C[s]`` the close of
its last bar, ``O[s]`` the open of its first bar. A bar of session ``s`` reads ``C``, highs, lows and
volumes of sessions ``< s`` (complete, so all before the bar) and its own session's bars up to itself.
Before the first session of the data, ``C`` is the data's first open (returns reaching back further
than the data read from there); trailing means over earlier sessions use the sessions available
(``min(s, n)``); with none, the feature is 0. Definitions (``n``: a window of sessions; defaults in
``LIBRARY_WINDOWS``; all returns are log returns):

- ``sret_{k}d``: ``log close[t] - log C[s - k]``, k = 1, 5, 10, 20 sessions (the current price
  against the close k sessions back);
- ``gap``: ``log O[s] - log C[s - 1]``, the overnight gap (0 in the data's first session);
- ``first_30m``: ``log close[first bar + h - 1] - log O[s]`` with ``h = ceil(30 / interval minutes)``
  bars (the first bar at 30m and coarser; the whole session at 1d): the first half-hour's return,
  defined from the bar that ends it on; **0 before** (not the previous session's value);
- ``xret_{k}d``: ``sret_{k}d`` minus its equal-weight mean over the tickers at the bar (k = 1, 5, 20);
- ``xrank_{k}d``: the cross-sectional rank of ``sret_{k}d`` at the bar (ties share their mean rank),
  scaled to ``[-0.5, 0.5]`` (0 with a single ticker);
- ``rv_{a}d_{b}d``: ``log((sd_a + 1e-6) / (sd_b + 1e-6))``, ``sd_n`` the population standard
  deviation of the daily returns ``log C[j] - log C[j - 1]`` of sessions ``s - n .. s - 1`` (a=5, b=20);
- ``volu_{n}d``: ``log1p(V[t]) - log1p(mean V)``, ``V[t]`` the volume of session ``s`` up to bar ``t``
  and the mean over sessions ``s - n .. s - 1`` of their volume up to the same position (their total
  when they had fewer bars: early closes);
- ``dollar_{n}d``: the same of dollar volume (``close * volume`` summed over the session's bars);
- ``high_{n}d``, ``low_{n}d``: ``log close[t]`` minus the log of the highest high (lowest low) of
  sessions ``s - n + 1 .. s - 1`` and of session ``s`` up to bar ``t``: <= 0 and >= 0;
- ``beta_{n}d``: the slope of a ticker's daily returns on the market's (the equal-weight mean of the
  tickers' daily returns) over sessions ``s - n .. s - 1`` (0 with fewer than 2 sessions or no
  market variance);
- ``zret_{k}d``: the return over the ``k`` complete sessions before the bar's, close to close
  (``log C[s - 1] - log C[s - 1 - k]``), less its equal-weight mean over the tickers, in units of the
  name's daily volatility over ``k`` sessions: divided by ``sd_b * sqrt(k)`` (``sd_b`` as in ``rv``,
  b = 20); 0 where fewer than ``b`` sessions precede the bar's or ``sd_b <= 1e-6`` (k = 1, 5, 20).
  Risk-adjusted residual returns, the form of short-term reversal and momentum factors;
- ``zret_{w}``: the same of the small set's ``ret_{w}`` (the last ``w`` bars, w = 390: the bar's
  own window, not whole sessions), divided by ``sd_b * sqrt(w / bars_per_session)``.

The session-level features are constant inside a session except ``sret``, ``xret``, ``xrank``,
``first_30m``, ``volu``, ``dollar``, ``high``, ``low`` and ``zret_{w}``, which move with the bar.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

#: Default windows of the library set (sessions unless named otherwise). ``opening_bars`` and
#: ``bars_per_session`` depend on the interval: ``library_windows`` fills them in.
LIBRARY_WINDOWS: dict[str, int] = {
    "sret_a": 1,
    "sret_b": 5,
    "sret_c": 10,
    "sret_d": 20,
    "rv_short": 5,
    "rv_long": 20,
    "volume_sessions": 20,
    "range_sessions": 20,
    "beta_sessions": 20,
    "opening_bars": 30,
    "bars_per_session": 390,
}
#: The session returns that also get a cross-sectional excess and rank.
CROSS_KEYS = ("sret_a", "sret_b", "sret_d")
#: Where among ``library_names`` the columns of :func:`asset_features` and of :func:`cross_features` go.
ASSET_COLUMNS = (0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16)
CROSS_COLUMNS = (6, 7, 8, 9, 10, 11, 17, 18, 19, 20, 21)
VOL_EPS = 1e-6


class FeatureBars(NamedTuple):
    """What the library set reads: ``(T, A)`` prices and volume, ``session_id (T,)``."""

    open: Tensor
    high: Tensor
    low: Tensor
    close: Tensor
    volume: Tensor
    session_id: Tensor


def is_library(windows: Mapping[str, int]) -> bool:
    """Whether ``windows`` describe the library set (its keys present)."""
    return "sret_d" in windows


def library_names(windows: Mapping[str, int]) -> tuple[str, ...]:
    """The library set's additions, in their column order."""
    w = windows
    sret = [f"sret_{w[k]}d" for k in ("sret_a", "sret_b", "sret_c", "sret_d")]
    return (
        *sret,
        "gap",
        "first_30m",
        *(f"xret_{w[k]}d" for k in CROSS_KEYS),
        *(f"xrank_{w[k]}d" for k in CROSS_KEYS),
        f"rv_{w['rv_short']}d_{w['rv_long']}d",
        f"volu_{w['volume_sessions']}d",
        f"dollar_{w['volume_sessions']}d",
        f"high_{w['range_sessions']}d",
        f"low_{w['range_sessions']}d",
        f"beta_{w['beta_sessions']}d",
        *(f"zret_{w[k]}d" for k in CROSS_KEYS),
        f"zret_{w['ret_long']}",
    )


def library_lookback(windows: Mapping[str, int]) -> int:
    """Bars that hold every session the last bar reads: its own and ``max window + 1`` earlier ones
    (a daily return reads the close before its session), whole, plus one spare session."""
    w = windows
    longest = max(w[k] for k in ("sret_a", "sret_b", "sret_c", "sret_d", "rv_long", "rv_short"))
    longest = max(longest, w["volume_sessions"], w["range_sessions"], w["beta_sessions"])
    return (longest + 2) * w["bars_per_session"]


def opening_bars(interval_minutes: int) -> int:
    """Bars of the first half hour on an interval of ``interval_minutes`` (0: daily -> 1)."""
    return 1 if interval_minutes <= 0 else max(1, math.ceil(30 / interval_minutes))


class Sessions(NamedTuple):
    """The session layout of a window: per bar its session (0-based) and position, per session its
    first and last bar."""

    index: Tensor  # (T,) int64
    position: Tensor  # (T,) int64
    first: Tensor  # (S,) int64
    last: Tensor  # (S,) int64
    count: int
    width: int  # the longest session's bars


def sessions_of(session_id: Tensor) -> Sessions:
    """The session layout of ``session_id (T,)``."""
    num_steps = session_id.shape[0]
    new = torch.ones(num_steps, dtype=torch.bool, device=session_id.device)
    new[1:] = session_id[1:] != session_id[:-1]
    index = torch.cumsum(new.to(torch.int64), 0) - 1
    first = torch.nonzero(new).flatten()
    last = torch.cat([first[1:] - 1, first.new_tensor([num_steps - 1])])
    position = torch.arange(num_steps, device=session_id.device) - first[index]
    return Sessions(index, position, first, last, int(first.shape[0]), int((last - first).max()) + 1)


def _prior(x: Tensor, n: int, fill: float = 0.0) -> Tensor:
    """``(S, A, n)``: for each session ``s`` the rows ``x[s - n .. s - 1]`` of ``x (S, A)``, ``fill``
    before the first."""
    pad = x.new_full((n, x.shape[1]), fill)
    return torch.cat([pad, x], 0)[:-1].unfold(0, n, 1) if n > 0 else x.new_empty(x.shape[0], x.shape[1], 0)


def _prior_mask(num_sessions: int, n: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """``(S, 1, n)``: 1 where ``_prior``'s entry is a real session."""
    j = torch.arange(num_sessions, device=device).view(-1, 1) - n + torch.arange(n, device=device).view(1, -1)
    return (j >= 0).to(dtype).unsqueeze(1)


def _prior_moments(x: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, centred values and mask over the prior ``n`` sessions of ``x (S, A)``."""
    windows = _prior(x, n)
    mask = _prior_mask(x.shape[0], n, x.device, x.dtype)
    count = mask.sum(-1).clamp(min=1.0)
    mean = (windows * mask).sum(-1) / count
    return mean, (windows - mean.unsqueeze(-1)) * mask, count


def _prior_std(x: Tensor, n: int) -> Tensor:
    """Population std over the prior ``n`` sessions (two-pass; 0 with fewer than 2)."""
    _, centred, count = _prior_moments(x, n)
    return torch.sqrt((centred * centred).sum(-1) / count)


def _by_position(values: Tensor, sessions: Sessions) -> Tensor:
    """``(S, P, A)``: ``values (T, A)`` laid out by session and position, zeros where no bar is."""
    grid = values.new_zeros(sessions.count, sessions.width, values.shape[1])
    grid[sessions.index, sessions.position] = values
    return grid


def _volume_ratio(values: Tensor, sessions: Sessions, n: int) -> Tensor:
    """``log1p`` of the session's cumulative ``values`` up to each bar minus ``log1p`` of its mean at
    the same position over the prior ``n`` sessions (0 without one)."""
    cum = torch.cumsum(_by_position(values, sessions), dim=1)  # (S, P, A): a session's total past its end
    csum = torch.cat([torch.zeros_like(cum[:1]), torch.cumsum(cum, dim=0)], 0)  # csum[s]: sessions < s
    s, p = sessions.index, sessions.position
    low = (s - n).clamp(min=0)
    count = (s - low).to(values.dtype).unsqueeze(-1)
    mean = (csum[s, p] - csum[low, p]) / count.clamp(min=1.0)
    ratio = torch.log1p(cum[s, p]) - torch.log1p(mean)
    return torch.where(count > 0, ratio, torch.zeros_like(ratio))


def _extreme(values: Tensor, sessions: Sessions, n: int, *, high: bool) -> Tensor:
    """The highest (``high``) or lowest value of sessions ``s - n + 1 .. s - 1`` and of session ``s``
    up to each bar, per bar ``(T, A)``."""
    fill = -math.inf if high else math.inf
    grid = values.new_full((sessions.count, sessions.width, values.shape[1]), fill)
    grid[sessions.index, sessions.position] = values
    running = torch.cummax(grid, dim=1).values if high else torch.cummin(grid, dim=1).values
    today = running[sessions.index, sessions.position]
    if n <= 1:
        return today
    whole = running[:, -1]  # (S, A): each session's extreme
    prior = _prior(whole, n - 1, fill)
    earlier = prior.amax(-1) if high else prior.amin(-1)
    return (
        torch.maximum(today, earlier[sessions.index])
        if high
        else torch.minimum(today, earlier[sessions.index])
    )


class _Daily(NamedTuple):
    closes: Tensor  # (S + 1, A) log C, row 0 the data's first open (before the first session)
    returns: Tensor  # (S, A) daily log returns of each session (the last one maybe incomplete)


def _daily(bars: FeatureBars, sessions: Sessions, dtype: torch.dtype) -> _Daily:
    log_c = torch.log(bars.close.to(dtype)[sessions.last])
    closes = torch.cat([torch.log(bars.open.to(dtype)[:1]), log_c], 0)
    return _Daily(closes, closes[1:] - closes[:-1])


def asset_features(bars: FeatureBars, windows: Mapping[str, int], dtype: torch.dtype) -> list[Tensor]:
    """The per-asset library features (every column but the cross-sectional ones and beta), ``(T, A)``
    each in ``dtype``, in ``library_names`` order without ``xret``, ``xrank`` and ``beta`` (their
    places: :data:`ASSET_COLUMNS`)."""
    w = windows
    sessions = sessions_of(bars.session_id)
    s, p = sessions.index, sessions.position
    log_close = torch.log(bars.close.to(dtype))
    daily = _daily(bars, sessions, dtype)
    sret = [
        log_close - daily.closes[(s + 1 - w[k]).clamp(min=0)]
        for k in ("sret_a", "sret_b", "sret_c", "sret_d")
    ]
    log_open = torch.log(bars.open.to(dtype)[sessions.first])  # (S, A)
    gap = (log_open - daily.closes[:-1])[s]
    h = w["opening_bars"]
    end = (sessions.first + h - 1).clamp(max=bars.close.shape[0] - 1)
    opening = (log_close[end] - log_open)[s]
    first_30m = torch.where((p >= h - 1).unsqueeze(-1), opening, torch.zeros_like(opening))
    rv = torch.log(
        (_prior_std(daily.returns, w["rv_short"]) + VOL_EPS)
        / (_prior_std(daily.returns, w["rv_long"]) + VOL_EPS)
    )
    volume = torch.clamp(bars.volume.to(dtype), min=0.0)
    volu = _volume_ratio(volume, sessions, w["volume_sessions"])
    dollar = _volume_ratio(volume * bars.close.to(dtype), sessions, w["volume_sessions"])
    n = w["range_sessions"]
    high = log_close - torch.log(_extreme(bars.high.to(dtype), sessions, n, high=True))
    low = log_close - torch.log(_extreme(bars.low.to(dtype), sessions, n, high=False))
    return [*sret, gap, first_30m, rv[s], volu, dollar, high, low]


def beta(returns: Tensor, n: int) -> Tensor:
    """``(S, A)``: each session's slope of the tickers' daily ``returns (S, A)`` on their equal-weight
    mean over the prior ``n`` sessions (0 with fewer than 2 or no market variance)."""
    market = returns.mean(dim=1, keepdim=True)
    _, ci, count = _prior_moments(returns, n)
    _, cm, _ = _prior_moments(market, n)
    cov = (ci * cm).sum(-1) / count
    var = (cm * cm).sum(-1) / count
    ok = var > 1e-14
    return torch.where(ok, cov / torch.where(ok, var, torch.ones_like(var)), torch.zeros_like(cov))


def cross_rank(x: Tensor) -> Tensor:
    """Rank of each ticker in its row of ``x (T, A)`` (ties share their mean rank), scaled to
    ``[-0.5, 0.5]``; 0 with one ticker."""
    num_assets = x.shape[1]
    if num_assets < 2:
        return torch.zeros_like(x)
    # On the CPU, NumPy's sort and run scans give the binary searches' counts several times faster;
    # NaN (unequal to itself) keeps the searches, which define its rank.
    if x.device.type == "cpu" and not bool(x.isnan().any()):
        counts = torch.from_numpy(_rank_counts(x.numpy()))
    else:
        ordered = torch.sort(x, dim=1).values.contiguous()
        below = torch.searchsorted(ordered, x.contiguous(), right=False)
        upto = torch.searchsorted(ordered, x.contiguous(), right=True)
        counts = below + upto - 1
    return counts.to(x.dtype) / (2.0 * (num_assets - 1)) - 0.5


def _rank_counts(x: np.ndarray) -> np.ndarray:
    """``(T, A)`` int64: per entry of ``x`` (no NaN), the entries of its row below it plus those up
    to it (itself and its ties included) minus 1, i.e. where its run of equal values starts and ends
    in the sorted row."""
    rows, width = x.shape
    index = np.argsort(x, axis=1)
    ordered = np.take_along_axis(x, index, axis=1)
    starts = np.ones((rows, width), dtype=bool)
    np.not_equal(ordered[:, 1:], ordered[:, :-1], out=starts[:, 1:])
    flat = starts.ravel()
    first = np.flatnonzero(flat)  # where each run starts in the flattened rows
    after = np.append(first[1:], flat.size)  # where it ends: a row's last run ends at the next row
    run = np.cumsum(flat) - 1
    row_start = np.arange(rows).reshape(-1, 1) * width
    sums = (first[run] + after[run]).reshape(rows, width) - 2 * row_start - 1
    counts = np.empty_like(sums)
    counts.ravel()[(row_start + index).ravel()] = sums.ravel()
    return counts


def _risk_units(returns: Tensor, scale: Tensor, horizon: float) -> Tensor:
    """``returns (.., A)`` less their mean over the tickers, over ``scale * sqrt(horizon)`` (the
    daily volatility ``scale`` broadcast to ``returns``); 0 where ``scale <= VOL_EPS``."""
    excess = returns - returns.mean(dim=-1, keepdim=True)
    ok = scale > VOL_EPS
    safe = torch.where(ok, scale, torch.ones_like(scale)) * math.sqrt(horizon)
    return torch.where(ok, excess / safe, torch.zeros_like(excess))


def cross_features(
    per_asset: Tensor, bars: FeatureBars, windows: Mapping[str, int], dtype: torch.dtype, ret_long: Tensor
) -> Iterator[Tensor]:
    """The cross-sectional columns (``xret``, ``xrank``, ``beta``, ``zret``), ``(T, A)`` each in
    their :data:`CROSS_COLUMNS` order, from ``per_asset (T, A, F)`` whose first four columns are every
    ticker's ``sret`` (``asset_features`` and ``library_names`` order) and the small set's
    ``ret_long (T, A)``. Yielded one at a time: a caller that stores each before taking the next
    holds one ``(T, A)`` column of the work dtype at a time, not eleven (about 75 MB each at 100
    tickers x 243 one-minute sessions in float64)."""
    w = windows
    sessions = sessions_of(bars.session_id)
    order = ("sret_a", "sret_b", "sret_c", "sret_d")
    rets = [per_asset[..., order.index(k)].to(dtype) for k in CROSS_KEYS]
    for r in rets:
        yield r - r.mean(dim=1, keepdim=True)
    for r in rets:
        yield cross_rank(r)
    del rets
    daily = _daily(bars, sessions, dtype)
    yield beta(daily.returns, w["beta_sessions"])[sessions.index]
    # Each session's prior daily volatility, from a full window only: a few sessions' estimate can be
    # near 0 and blow the ratio up (0 there, as before the window is full).
    n = w["rv_long"]
    _, centred, count = _prior_moments(daily.returns, n)
    sd = torch.where(count >= n, torch.sqrt((centred * centred).sum(-1) / count), torch.zeros_like(count))
    done = torch.arange(sessions.count, device=sd.device)  # closes[s]: the close before session s
    for k in CROSS_KEYS:
        past = daily.closes[done] - daily.closes[(done - w[k]).clamp(min=0)]
        yield _risk_units(past, sd, w[k])[sessions.index]
    yield _risk_units(ret_long.to(dtype), sd[sessions.index], w["ret_long"] / w["bars_per_session"])
