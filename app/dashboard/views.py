"""Pure transforms from artifacts to what the pages show: metric cards, tables, derived series.

No Streamlit here, so every function is unit-tested directly. Formatting lives here too, so the
tests compare exactly the strings a user sees with the values in metrics.json.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

BENCHMARK_DEFAULT = "buy_and_hold"
CHAMPION_DEFAULT = "champion"
# Strategies the backtest adds for comparison (backtests.engine baselines): never the champion.
BASELINES = frozenset({"buy_and_hold", "cash", "equal_weight", "index"})

Kind = Literal["pct", "ratio", "prob", "money"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric of metrics.json: its key, card label, display kind and which direction is better."""

    key: str
    label: str
    kind: Kind
    higher_is_better: bool = True
    help: str = ""


# The eight cards of the Overview, in order (the list).
CARD_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("cum_returns_final", "Cum. return", "pct", help="Cumulative (total) return over the window."),
    MetricSpec("annual_return", "Ann. return", "pct", help="Annual return: compound annual growth rate."),
    MetricSpec(
        "annual_volatility", "Volatility", "pct", higher_is_better=False, help="Annualized std of returns."
    ),
    MetricSpec("sharpe_ratio", "Sharpe", "ratio", help="Annualized Sharpe ratio of daily returns (rf = 0)."),
    MetricSpec("sortino_ratio", "Sortino", "ratio", help="Annualized Sortino ratio (downside deviation)."),
    MetricSpec("max_drawdown", "Max drawdown", "pct", help="Worst peak-to-trough loss (negative)."),
    MetricSpec("calmar_ratio", "Calmar", "ratio", help="Annual return / |max drawdown|."),
    MetricSpec(
        "deflated_sharpe_ratio",
        "DSR",
        "prob",
        help="Deflated Sharpe ratio: probability the Sharpe is real after the number of pods tried.",
    ),
)

# The extra columns of the full comparison table.
TABLE_METRICS: tuple[MetricSpec, ...] = CARD_METRICS + (
    MetricSpec("probabilistic_sharpe_ratio", "PSR", "prob"),
    MetricSpec("turnover", "Turnover / day", "ratio", higher_is_better=False),
    # costs_paid is a fraction of the initial value (backtests.metrics.costs_paid).
    MetricSpec("costs_paid", "Costs (of initial)", "pct", higher_is_better=False),
    MetricSpec("exposure", "Exposure", "pct"),
    MetricSpec("hit_rate", "Hit rate", "pct"),
)


@dataclass(frozen=True)
class Card:
    """One ``st.metric`` card: what the page renders, already formatted."""

    strategy: str
    key: str
    label: str
    value: str
    delta: str | None
    delta_color: Literal["normal", "inverse", "off"]
    help: str
    delta_arrow: Literal["auto", "off"] = "auto"  # "off" for a delta that is a note, not a difference


# --------------------------------------------------------------------------- formatting


# Cards hold about eight characters at a 1400-px window; beyond four digits a value is shown with a
# thousands suffix (35,252.88 -> 35.3k, 3,525,288% -> 3.5M%) and the card's tooltip has it in full.
_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))


def _compact(number: float, signed: bool = False) -> str:
    """Two decimals below 1,000 in magnitude, else three significant digits and a k/M/B/T suffix."""
    sign = "+" if signed else ""
    magnitude = abs(number)
    if magnitude < 1000:
        return f"{number:{sign}.2f}"
    for scale, suffix in _SUFFIXES:
        if magnitude >= scale:
            scaled = number / scale
            if abs(scaled) >= 1000:  # beyond the largest suffix
                return f"{number:{sign}.1e}"
            digits = 0 if abs(scaled) >= 100 else 1
            return f"{scaled:{sign}.{digits}f}{suffix}"
    raise AssertionError("unreachable")


def format_metric(value: float | None, kind: Kind) -> str:
    """The one display format of a metric value (short enough for a card); ``n/a`` for null/NaN."""
    if value is None or not math.isfinite(float(value)):
        return "n/a"
    value = float(value)
    if kind == "pct":
        return f"{_compact(value * 100)}%"
    if kind == "money":
        return f"${value:,.2f}"
    if kind == "prob":
        return _prob(value)  # a DSR of 0.003 is not "0.00"
    return _compact(value)


def format_full(value: float | None, kind: Kind) -> str:
    """The exact value for a tooltip: every significant digit, thousands separators."""
    if value is None or not math.isfinite(float(value)):
        return "n/a"
    value = float(value)
    if kind == "pct":
        return f"{value * 100:,.6g}%" if abs(value) < 1e4 else f"{value * 100:,.2f}%"
    if kind == "money":
        return f"${value:,.2f}"
    return f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.2f}"


def format_delta(delta: float | None, kind: Kind) -> str | None:
    """A card's delta: signed, percentage points for percent metrics; None when undefined."""
    if delta is None or not math.isfinite(delta):
        return None
    if kind == "pct":
        return f"{_compact(delta * 100, signed=True)} pp"
    if kind == "money":
        return f"{delta:+,.2f}"
    return _compact(delta, signed=True)


def strategy_label(name: str) -> str:
    """A strategy's display name (``buy_and_hold`` -> Buy & hold)."""
    return {
        "buy_and_hold": "Buy & hold",
        "champion": "Champion",
        "cash": "Cash",
        "equal_weight": "Equal weight",
    }.get(name, name.replace("_", " "))


# --------------------------------------------------------------------------- metrics


def benchmark_name(metrics: dict[str, Any]) -> str | None:
    """The benchmark strategy named by metrics.json (default buy_and_hold), if present."""
    strategies = metrics.get("strategies", {})
    name = metrics.get("benchmark") or BENCHMARK_DEFAULT
    return name if name in strategies else None


def champion_name(metrics: dict[str, Any]) -> str | None:
    """``champion`` if present, else the first strategy that is neither the benchmark nor a baseline."""
    strategies = list(metrics.get("strategies", {}))
    if CHAMPION_DEFAULT in strategies:
        return CHAMPION_DEFAULT
    bench = benchmark_name(metrics)
    others = [s for s in strategies if s != bench and s not in BASELINES]
    return others[0] if others else None


# Annual figures from a short window extrapolate a few lucky days to a year (the default demo's
# 12-session test window printed 3,525,288%): the backtest writes them as null below this many
# sessions (metrics.json ``annualized_min_sessions``), and the cards say why.
ANNUALIZED_MIN_SESSIONS = 63
_ANNUALIZED = frozenset({"annual_return", "calmar_ratio"})


def short_window(metrics: dict[str, Any]) -> tuple[int, int] | None:
    """``(sessions, minimum)`` when metrics.json says the window is too short to annualize, else None.

    Older runs carry neither key: they are taken at face value (their annual figures are shown).
    """
    sessions = metrics.get("num_sessions")
    minimum = metrics.get("annualized_min_sessions") or ANNUALIZED_MIN_SESSIONS
    if isinstance(sessions, int | float) and not isinstance(sessions, bool) and sessions < minimum:
        return int(sessions), int(minimum)
    return None


def metric_cards(metrics: dict[str, Any], strategy: str, versus: str | None = None) -> list[Card]:
    """Cards for ``strategy``; with ``versus``, each card's delta is strategy minus versus.

    Values are short (``format_metric``); the tooltip carries the exact value and the benchmark's.
    """
    values = metrics["strategies"][strategy]
    other = metrics["strategies"].get(versus) if versus else None
    short = short_window(metrics)
    cards = []
    for spec in CARD_METRICS:
        value = values.get(spec.key)
        delta = None
        notes = [spec.help, f"{strategy_label(strategy)}: {format_full(value, spec.kind)}."]
        if other is not None:
            base = other.get(spec.key)
            notes.append(f"{strategy_label(versus or '')}: {format_full(base, spec.kind)}.")
            if value is not None and base is not None:
                delta = format_delta(float(value) - float(base), spec.kind)
        color: Literal["normal", "inverse", "off"] = "normal" if spec.higher_is_better else "inverse"
        arrow: Literal["auto", "off"] = "auto"
        if value is None and spec.key in _ANNUALIZED and short is not None:
            period = format_metric(values.get("cum_returns_final"), "pct")
            notes = [
                f"{spec.help} n/a: window under {short[1]} sessions ({short[0]}); "
                f"the period return is {period} (Cum. return)."
            ]
            # The card says why in place of a delta: the period return, or the sessions rule.
            delta = f"period return {period}" if spec.key == "annual_return" else f"under {short[1]} sessions"
            color, arrow = "off", "off"
        cards.append(
            Card(
                strategy=strategy,
                key=spec.key,
                label=spec.label,
                value=format_metric(value, spec.kind),
                delta=delta,
                delta_color=color,
                help=" ".join(notes),
                delta_arrow=arrow,
            )
        )
    return cards


def short_window_note(metrics: dict[str, Any]) -> str | None:
    """The caption under the cards when annual figures are withheld, else None."""
    short = short_window(metrics)
    if short is None:
        return None
    return (
        f"Ann. return and Calmar: n/a: window under {short[1]} sessions ({short[0]} in this window); "
        "the period return is the Cum. return card."
    )


# A DSR of 0.95 is the usual bar (a 5 % chance the Sharpe is luck once the trials are counted);
# a PBO above one half means the in-sample best pod ranks below the median out of sample more
# often than not (Bailey, Borwein, Lopez de Prado and Zhu, 2015).
DSR_SIGNIFICANT = 0.95
PBO_OVERFIT = 0.5


@dataclass(frozen=True)
class Verdict:
    """A plain-words reading of the champion's DSR and PBO."""

    significant: bool | None  # None: not enough information
    text: str


def edge_verdict(metrics: dict[str, Any], strategy: str | None) -> Verdict | None:
    """ "edge not significant: DSR 0.003, PBO 0.62" and the like; None without a DSR and a PBO."""
    values = metrics.get("strategies", {}).get(strategy or "", {})
    dsr = _finite_or_none(values.get("deflated_sharpe_ratio"))
    pbo = _finite_or_none(metrics.get("pbo"))
    if dsr is None and pbo is None:
        return None
    figures = ", ".join(
        part
        for part in (
            f"DSR {_prob(dsr)}" if dsr is not None else "DSR n/a",
            f"PBO {_prob(pbo)}" if pbo is not None else None,
        )
        if part
    )
    trials = metrics.get("num_trials")
    if trials is not None:
        figures += f" over {trials} trial(s)"
    if dsr is None:
        return Verdict(None, f"edge not measured: {figures}")
    reasons = []
    if dsr < DSR_SIGNIFICANT:
        reasons.append(f"DSR below {DSR_SIGNIFICANT}")
    if pbo is not None and pbo > PBO_OVERFIT:
        reasons.append(f"PBO above {PBO_OVERFIT}: selection likely overfit")
    if reasons:
        return Verdict(False, f"edge not significant: {figures} ({'; '.join(reasons)})")
    return Verdict(True, f"edge significant: {figures}")


def _prob(value: float) -> str:
    """A probability with the digits that matter: 0.003, 0.62, <0.001."""
    if 0 < value < 0.001:
        return "<0.001"
    return f"{value:.3f}" if 0 < value < 0.01 else f"{value:.2f}"


def _finite_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def pbo_logits(metrics: dict[str, Any]) -> list[float]:
    """The finite PBO logits of metrics.json (empty for older runs)."""
    raw = metrics.get("pbo_logits")
    if not isinstance(raw, list):
        return []
    return [v for v in (_finite_or_none(x) for x in raw) if v is not None]


def card_notes(cards: list[Card] | None = None) -> str:
    """One caption explaining every card (what each number means)."""
    specs = CARD_METRICS if cards is None else [s for s in CARD_METRICS if s.key in {c.key for c in cards}]
    notes = " · ".join(f"**{s.label}**: {s.help}" for s in specs)
    return (
        notes
        + " · The small numbers under the champion's cards are champion minus benchmark (pp: percentage points)."
    )


def comparison_table(metrics: dict[str, Any]) -> pd.DataFrame:
    """Every strategy (rows) by every metric (columns), formatted."""
    rows = {}
    for name, values in metrics.get("strategies", {}).items():
        rows[strategy_label(name)] = {
            spec.label: format_metric(values.get(spec.key), spec.kind) for spec in TABLE_METRICS
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "strategy"
    return table


def markdown_table(table: pd.DataFrame) -> str:
    """A small DataFrame as a GitHub-flavoured markdown table (index as the first column)."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    head = [cell(table.index.name or ""), *map(cell, table.columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for index, row in table.iterrows():
        lines.append("| " + " | ".join([cell(index), *map(cell, row.tolist())]) + " |")
    return "\n".join(lines)


def window_caption(metrics: dict[str, Any]) -> str:
    """One line saying which window and conventions the numbers use."""
    parts = []
    if metrics.get("window"):
        parts.append(f"{metrics['window']} window")
    if metrics.get("start") and metrics.get("end"):
        parts.append(f"{metrics['start']} to {metrics['end']}")
    if metrics.get("period"):
        parts.append(f"{metrics['period']} returns")
    if metrics.get("annualization"):
        parts.append(f"annualization {metrics['annualization']}")
    if metrics.get("num_sessions") is not None:
        parts.append(f"{metrics['num_sessions']} sessions")
    if metrics.get("num_trials") is not None:
        parts.append(f"DSR over {metrics['num_trials']} trial(s)")
    costs = costs_caption(metrics)
    if costs:
        parts.append(costs)
    return " · ".join(parts)


def costs_caption(metrics: dict[str, Any]) -> str | None:
    """ "costs 0.20% + 1 bp" from metrics.json's cost_rate and slippage_bps (older runs: None)."""
    rate = _finite_or_none(metrics.get("cost_rate"))
    slip = _finite_or_none(metrics.get("slippage_bps"))
    if rate is None and slip is None:
        return None
    parts = [f"{rate * 100:.2f}%" if rate is not None else None, f"{slip:g} bp" if slip is not None else None]
    return "costs " + " + ".join(p for p in parts if p)


# --------------------------------------------------------------------------- series


def drawdown(equity: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
    """Underwater curve: equity / running peak - 1 (0 at a new high, negative below it)."""
    peak = equity.cummax()
    return equity / peak - 1.0


def monthly_returns(daily: pd.Series) -> pd.DataFrame:
    """Compounded monthly returns as a year x month table (columns Jan..Dec, NaN where no data)."""
    daily = daily.dropna()
    if daily.empty:
        return pd.DataFrame(columns=_MONTHS, dtype="float64")
    index = pd.DatetimeIndex(daily.index)
    grouped = (1.0 + daily).groupby([index.year, index.month]).prod() - 1.0
    table = grouped.unstack(level=1).reindex(columns=range(1, 13))
    table.columns = _MONTHS
    table.index.name = "year"
    return table


def daily_returns_table(daily: pd.Series) -> pd.DataFrame:
    """Daily returns as a week x weekday table (rows: the week's Monday, columns Mon..Fri)."""
    daily = daily.dropna()
    if daily.empty:
        return pd.DataFrame(columns=_WEEKDAYS, dtype="float64")
    index = pd.DatetimeIndex(daily.index).normalize()
    frame = pd.DataFrame(
        {
            "week": (index - pd.to_timedelta(index.weekday, unit="D")).strftime("%Y-%m-%d"),
            "weekday": index.weekday,
            "value": daily.to_numpy(),
        }
    )
    table = frame.pivot_table(index="week", columns="weekday", values="value", aggfunc="last")
    table = table.reindex(columns=range(5))
    table.columns = _WEEKDAYS
    table.index.name = "week of"
    return table


_WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri"]
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def weights_wide(positions: pd.DataFrame, strategy: str, max_points: int = 1500) -> pd.DataFrame:
    """Weights of ``strategy`` as timestamp x ticker (0 where not held), at most ``max_points`` rows.

    Long runs are thinned by keeping the last row of each bucket: weights are a step function
    (held until the next decision), so the last row is what was actually held at the bucket's end.
    """
    rows = positions[positions["strategy"] == strategy]
    if rows.empty:
        return pd.DataFrame()
    wide = rows.pivot_table(index="timestamp", columns="ticker", values="weight", aggfunc="last").fillna(0.0)
    # Largest average holdings (over the whole window) first: the area chart stacks them lowest.
    wide = wide[wide.mean().sort_values(ascending=False, kind="stable").index]
    if len(wide) > max_points:
        bucket = np.arange(len(wide)) * max_points // len(wide)
        last = np.flatnonzero(np.r_[bucket[1:] != bucket[:-1], True])
        wide = wide.iloc[last]
    return wide


def trades_table(trades: pd.DataFrame, strategy: str | None = None, limit: int = 5000) -> pd.DataFrame:
    """Most recent trades first (at most ``limit`` rows), with a side column."""
    rows = trades if strategy is None else trades[trades["strategy"] == strategy]
    rows = rows.sort_values("timestamp", ascending=False, kind="stable").head(limit).copy()
    rows.insert(3, "side", np.where(rows["notional"] >= 0, "buy", "sell"))
    return rows.reset_index(drop=True)


def cost_summary(trades: pd.DataFrame) -> pd.DataFrame:
    """Per strategy: number of trades, traded notional (absolute), costs paid, costs in bp of notional."""
    if trades.empty:
        return pd.DataFrame(columns=["trades", "traded notional", "costs", "cost bp"])
    grouped = trades.assign(abs_notional=trades["notional"].abs()).groupby("strategy")
    table = pd.DataFrame(
        {
            "trades": grouped.size(),
            "traded notional": grouped["abs_notional"].sum(),
            "costs": grouped["cost"].sum(),
        }
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        table["cost bp"] = np.where(
            table["traded notional"] > 0, table["costs"] / table["traded notional"] * 1e4, np.nan
        )
    return table.round(2)


def costs_by_ticker(trades: pd.DataFrame, strategy: str) -> pd.DataFrame:
    """Per ticker of ``strategy``: trades, traded notional and costs, most expensive first."""
    rows = trades[trades["strategy"] == strategy]
    table = (
        rows.assign(abs_notional=rows["notional"].abs())
        .groupby("ticker")
        .agg(trades=("cost", "size"), traded_notional=("abs_notional", "sum"), costs=("cost", "sum"))
    )
    return table.sort_values("costs", ascending=False)


# --------------------------------------------------------------------------- tables


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
            out[col] = _to_time(out[col])
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


# --------------------------------------------------------------------------- tournament


def first_column(frame: pd.DataFrame, *names: str) -> str | None:
    """The first of ``names`` that is a column of ``frame`` (stages name things slightly differently)."""
    return next((n for n in names if n in frame.columns), None)


def lineage(pods: pd.DataFrame, pod_id: str, max_depth: int = 1000) -> pd.DataFrame:
    """The ancestry of ``pod_id``: itself, its parent, grandparent, ... (cycles are cut)."""
    id_col = first_column(pods, "pod_id", "id", "pod")
    parent_col = first_column(pods, "parent_id", "parent")
    if pods.empty or id_col is None:
        return pd.DataFrame()
    by_id = {str(row[id_col]): row for _, row in pods.iterrows()}
    chain, seen, current = [], set(), str(pod_id)
    while current in by_id and current not in seen and len(chain) < max_depth:
        seen.add(current)
        row = by_id[current]
        chain.append(row)
        parent = row[parent_col] if parent_col else None
        if parent is None or (isinstance(parent, float) and math.isnan(parent)) or str(parent) == "":
            break
        current = str(parent)
    return pd.DataFrame(chain).reset_index(drop=True)


# Hyper-parameter columns of the leaderboard: label and printf format (sensible precision, sortable).
HPARAM_COLUMNS: dict[str, tuple[str, str]] = {
    "learning_rate": ("learning rate", "%.2e"),
    "gamma": ("gamma", "%.4f"),
    "gae_lambda": ("GAE lambda", "%.3f"),
    "clip_coef": ("clip", "%.3f"),
    "ent_coef": ("entropy coef", "%.2e"),
    "vf_coef": ("value coef", "%.3f"),
    "update_epochs": ("epochs", "%d"),
    "num_minibatches": ("minibatches", "%d"),
    "max_grad_norm": ("max grad norm", "%.2f"),
    "tau": ("tau", "%.4f"),
    "alpha": ("alpha", "%.3f"),
    "batch_size": ("batch size", "%d"),
}
# Validation metrics of a pod (backtests.metrics names): label, format ("percent" multiplies by 100).
POD_METRIC_COLUMNS: dict[str, tuple[str, str]] = {
    "sharpe_ratio": ("Sharpe", "%.2f"),
    "sortino_ratio": ("Sortino", "%.2f"),
    "max_drawdown": ("max drawdown", "percent"),
    "calmar_ratio": ("Calmar", "%.2f"),
    "cum_returns_final": ("return", "percent"),
    "annual_return": ("ann. return", "percent"),
    "annual_volatility": ("volatility", "percent"),
    "costs_paid": ("costs", "percent"),
    "turnover": ("turnover / day", "%.2f"),
    "exposure": ("exposure", "percent"),
    "hit_rate": ("hit rate", "percent"),
    "num_days": ("sessions", "%d"),
}
_POD_BASE = {
    "rank": ("rank", "%d"),
    "pod_id": ("pod", None),
    "parent_id": ("parent", None),
    "generation": ("gen", "%d"),
    "score": ("score", "%.3f"),
}
# The metrics a quant reads first stand before the hyper-parameters; the rest follow them.
_KEY_METRICS = frozenset({"sharpe_ratio", "max_drawdown", "calmar_ratio", "costs_paid"})
_POD_TAIL = {
    "algo": ("algo", None),
    "status": ("status", None),
    "env_steps": ("env steps", "%d"),
    "seed": ("seed", "%d"),
    "updated": ("updated", None),
}


@dataclass(frozen=True)
class PodTable:
    """A pods table with hyper-parameters and metrics as columns, and each column's display format."""

    frame: pd.DataFrame
    formats: dict[str, str]  # column -> printf format (percent columns hold percent values)


def pod_table(pods: pd.DataFrame, time_columns: tuple[str, ...] = ("updated",)) -> PodTable:
    """Leaderboard or pods rows with ``hparams`` and ``metrics`` expanded into numeric columns.

    Columns: rank, pod, parent, gen, score, Sharpe, max drawdown, Calmar, costs, the
    hyper-parameters (learning rate, gamma, clip, epochs, ...), the other validation metrics, algo,
    status, env steps, seed, updated. Columns empty for every pod are left out; keys a later stage
    adds show under their own name. Percent metrics are in percent (two decimals); no cell holds JSON.
    """
    if pods.empty:
        return PodTable(pd.DataFrame(), {})
    columns: dict[str, pd.Series] = {}
    formats: dict[str, str] = {}

    def add(source: pd.Series, label: str, fmt: str | None) -> None:
        columns[label] = source
        if fmt:
            formats[label] = fmt

    for key, (label, fmt) in _POD_BASE.items():
        if key in pods.columns:
            add(pods[key], label, fmt)
    groups = (
        ("metrics", POD_METRIC_COLUMNS, lambda k: k in _KEY_METRICS),
        ("hparams", HPARAM_COLUMNS, lambda k: True),
        ("metrics", POD_METRIC_COLUMNS, lambda k: k not in _KEY_METRICS),
    )
    for nested, known, wanted in groups:
        if nested not in pods.columns:
            continue
        expanded = pd.DataFrame([v if isinstance(v, dict) else {} for v in pods[nested]], index=pods.index)
        keys = [k for k in known if k in expanded.columns]
        keys += sorted(c for c in expanded.columns if c not in known)
        for key in (k for k in keys if wanted(k)):
            label, fmt = known.get(key, (str(key).replace("_", " "), None))
            if label in columns:  # a name clash with a base column: keep both
                label = f"{nested}.{key}"
            values = expanded[key]
            if values.isna().all():  # e.g. Calmar on a short validation window: nothing to show
                continue
            numeric = pd.to_numeric(values, errors="coerce")
            if numeric.notna().sum() == values.notna().sum():
                values, fmt = numeric.astype("float64"), fmt or "%.4g"
                if fmt == "percent":  # two decimals everywhere ("5.40%", not "5.4%"), still numeric
                    values, fmt = values * 100, "%.2f%%"
            else:
                values = values.map(plain_text)
            add(values, label, fmt)
    for key, (label, fmt) in _POD_TAIL.items():
        if key in pods.columns:
            add(_to_time(pods[key]) if key in time_columns else pods[key], label, fmt)
    frame = pd.DataFrame(columns).reset_index(drop=True)
    return PodTable(tidy_table(frame), formats)


def mutation(child: Any, parent: Any) -> str:
    """What a child pod changed: "learning rate 1.85e-03 -> 2.22e-03, gamma 0.8789 -> 0.8000"."""
    if not isinstance(child, dict):
        return ""
    if not isinstance(parent, dict):
        return "new pod (no parent)"
    changes = []
    for key in sorted(set(child) | set(parent), key=lambda k: (k not in HPARAM_COLUMNS, k)):
        old, new = parent.get(key), child.get(key)
        if old == new:
            continue
        label, fmt = HPARAM_COLUMNS.get(key, (str(key).replace("_", " "), "%.4g"))
        changes.append(f"{label} {_fmt_param(old, fmt)} -> {_fmt_param(new, fmt)}")
    return ", ".join(changes) if changes else "copied unchanged"


def _fmt_param(value: Any, fmt: str) -> str:
    if value is None:
        return "unset"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return fmt % value if fmt != "%d" else f"{int(value)}"
    return str(value)


def lineage_points(pods: pd.DataFrame, leaders: set[str], champion: str | None) -> pd.DataFrame:
    """Every scored pod as ``pod, parent, generation, score, role, mutation`` (the lineage chart's data).

    ``role`` is champion / leaderboard / other; ``mutation`` names the hyper-parameters changed
    against the parent.
    """
    cols = ["pod", "parent", "generation", "score", "role", "mutation", "seq"]
    id_col = first_column(pods, "pod_id", "id", "pod")
    if pods.empty or id_col is None or "score" not in pods.columns:
        return pd.DataFrame(columns=cols)
    parent_col = first_column(pods, "parent_id", "parent")
    hparams = (
        pods["hparams"] if "hparams" in pods.columns else pd.Series([None] * len(pods), index=pods.index)
    )
    by_id = dict(zip(pods[id_col].astype(str), hparams, strict=True))
    rows = []
    for i, (_, row) in enumerate(pods.iterrows()):
        score = _finite_or_none(row.get("score"))
        if score is None:
            continue
        pod = str(row[id_col])
        parent = row.get(parent_col) if parent_col else None
        parent = None if parent is None or (isinstance(parent, float) and math.isnan(parent)) else str(parent)
        role = "champion" if pod == champion else ("leaderboard" if pod in leaders else "other")
        rows.append(
            {
                "pod": pod,
                "parent": parent,
                "generation": int(row.get("generation") or 0),
                "score": score,
                "role": role,
                "mutation": mutation(by_id.get(pod), by_id.get(parent) if parent else None),
                "seq": int(row["seq"]) if "seq" in row and pd.notna(row["seq"]) else i,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def lineage_table(pods: pd.DataFrame, pod_id: str) -> PodTable:
    """The ancestry of ``pod_id`` (newest first) as a pod table with a ``mutation`` column."""
    chain = lineage(pods, pod_id)
    if chain.empty:
        return PodTable(pd.DataFrame(), {})
    hparams = list(chain["hparams"]) if "hparams" in chain.columns else [None] * len(chain)
    changes = [
        mutation(hparams[i], hparams[i + 1] if i + 1 < len(chain) else None) for i in range(len(chain))
    ]
    table = pod_table(chain)
    table.frame.insert(min(3, len(table.frame.columns)), "mutation", changes)
    return table


def status_counts(pods: pd.DataFrame) -> dict[str, int]:
    """Pods tried, and how many ended in each status (``failed`` included)."""
    counts = {"tried": len(pods)}
    col = first_column(pods, "status", "state")
    if col is not None:
        counts.update({str(k): int(v) for k, v in pods[col].value_counts().items()})
    return counts


def score_history(events: pd.DataFrame) -> pd.DataFrame:
    """Scored events as ``time, pod, score`` rows (for the fitness-over-time chart)."""
    if events.empty:
        return pd.DataFrame(columns=["time", "pod", "score"])
    time_col = first_column(events, "time", "timestamp", "created_at", "ts")
    pod_col = first_column(events, "pod_id", "pod", "pod_id_")
    kind_col = first_column(events, "kind", "event", "type")
    rows = events if kind_col is None else events[events[kind_col].astype(str) == "scored"]
    scores = (
        rows["score"]
        if "score" in rows.columns
        else rows.get("payload", pd.Series(dtype=object)).map(_payload_score)
    )
    out = pd.DataFrame(
        {
            "time": _to_time(rows[time_col]) if time_col else pd.RangeIndex(len(rows)),
            "pod": rows[pod_col].astype(str) if pod_col else "pod",
            "score": pd.to_numeric(scores, errors="coerce"),
        }
    ).dropna(subset=["score"])
    return out.sort_values("time", kind="stable").reset_index(drop=True)


def _payload_score(payload: Any) -> float | None:
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return None
    if isinstance(payload, dict):
        for key in ("score", "fitness", "sharpe"):
            if isinstance(payload.get(key), int | float):
                return float(payload[key])
    return None


def _to_time(col: pd.Series) -> pd.Series:
    if pd.api.types.is_numeric_dtype(col):
        # Unix seconds are the usual SQLite convention.
        return pd.to_datetime(col, unit="s", utc=True)
    return pd.to_datetime(col, utc=True, errors="coerce", format="mixed")


# --------------------------------------------------------------------------- training


# Step counters of a curve: x axes, not metrics. ``lineage_env_steps`` (tournament pods) counts the
# steps of the pod's ancestors too, so a child's curve continues its parent's.
STEP_COLUMNS = ("env_steps", "lineage_env_steps", "global_step", "update", "iteration")


def curve_x_axes(curves: dict[str, pd.DataFrame]) -> list[str]:
    """The step columns every curve has (``env_steps`` first)."""
    return [c for c in STEP_COLUMNS[:2] if curves and all(c in f.columns for f in curves.values())]


def curve_metrics(curves: dict[str, pd.DataFrame]) -> list[str]:
    """Metric columns present in any pod's curve, ``eval/`` and ``charts/`` first."""
    names: set[str] = set()
    for frame in curves.values():
        names.update(
            c for c in frame.columns if c not in STEP_COLUMNS and pd.api.types.is_numeric_dtype(frame[c])
        )
    order = {"eval": 0, "charts": 1, "tournament": 2, "losses": 3}
    return sorted(names, key=lambda n: (order.get(n.split("/", 1)[0], 4), n))
