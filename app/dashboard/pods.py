"""The tournament's pods as the Tournament page shows them: the leaderboard with hyper-parameters
and metrics as columns, lineage (ancestry, mutations), status counts and the score history.

No Streamlit here, so every function is unit-tested directly.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from app.dashboard.formatting import finite_or_none
from app.dashboard.tables import first_column, plain_text, tidy_table, to_time


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
            add(to_time(pods[key]) if key in time_columns else pods[key], label, fmt)
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
        score = finite_or_none(row.get("score"))
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
            "time": to_time(rows[time_col]) if time_col else pd.RangeIndex(len(rows)),
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
