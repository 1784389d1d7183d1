"""What the CLI shows: rich tables, progress bars and the tournament's live view.

Workflows (``app.workflows``) compute and return; the commands hand their results to these
functions. Progress displays are context managers whose value is the callback a workflow feeds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app import context
from backtests import report
from backtests.capacity import curve_lines
from backtests.metrics_model import MetricsDocument, StrategyMetrics
from backtests.verdict import ANNUALIZED_KEYS, prob_text, stated_verdict


# --- training -------------------------------------------------------------------------------------------
class TrainProgress:
    """A rich progress bar fed by the learner's callback events (env-steps/s, latest eval score)."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.enabled = total, enabled
        self.progress: Any = None

    @classmethod
    def factory(cls, enabled: bool) -> Callable[[int], TrainProgress]:
        """``total -> TrainProgress``: what ``train_single(progress=...)`` takes."""
        return lambda total: cls(total, enabled=enabled)

    def __enter__(self) -> Callable[[dict[str, Any]], bool]:
        if self.enabled:
            self.progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("env-steps · {task.fields[rate]} steps/s · valid {task.fields[score]}"),
                TimeElapsedColumn(),
                console=context.err_console,
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task("train", total=self.total, rate="-", score="-")
        return self.on_event

    def on_event(self, event: dict[str, Any]) -> bool:
        """Show the event; never stops training (``agents.training.Callback``)."""
        if self.progress is None or event.get("event") != "update":
            return True
        fields: dict[str, Any] = {"rate": f"{event.get('charts/steps_per_s', 0.0):,.0f}"}
        if "eval/score" in event:
            fields["score"] = (
                f"sharpe {event['eval/score']:.2f}, log-ret {event.get('eval/log_return', float('nan')):+.4f} "
                f"(b&h {event.get('eval/buy_and_hold_log_return', float('nan')):+.4f})"
            )
        self.progress.update(self.task, completed=min(self.total, int(event["env_steps"])), **fields)
        return True

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


def single_run_line(summary: dict[str, Any]) -> str:
    """The one-line result of ``podracer train``."""
    valid = summary["valid"]
    return (
        f"run {summary['run_id']}: {summary['env_steps']:,} env-steps, valid Sharpe {valid.get('sharpe', 0):.2f}, "
        f"log return {valid.get('log_return', 0):+.4f} vs buy-and-hold "
        f"{valid.get('buy_and_hold_log_return', 0):+.4f}\n  saved {summary['run_dir']}"
    )


# --- tournament -----------------------------------------------------------------------------------------
class TournamentLive:
    """A rich live view of the pool and the leaderboard, fed by the orchestrator's snapshots."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.live: Any = None

    @classmethod
    def factory(cls, enabled: bool) -> Callable[[], TournamentLive]:
        """What ``train_tournament(progress=...)`` takes."""
        return lambda: cls(enabled=enabled)

    def __enter__(self) -> Callable[[dict[str, Any]], None] | None:
        if not self.enabled:
            return None
        self.live = Live(console=context.err_console, refresh_per_second=2, transient=False)
        self.live.start()
        return self.update

    def update(self, snap: dict[str, Any]) -> None:
        self.live.update(render_tournament(snap))

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()


def render_tournament(snap: dict[str, Any]) -> Any:
    """The live view of one orchestrator snapshot: budget line, pool table, leaderboard table."""
    spent, budget = snap["env_steps_spent"], snap.get("budget_steps")
    wall, budget_s = snap["wall_s"], snap.get("budget_s")
    line = f"[bold]tournament {snap['run_id']}[/]  env-steps {spent:,}" + (f" / {budget:,}" if budget else "")
    line += f"  ·  {wall:,.0f} s" + (f" / {budget_s:,.0f} s" if budget_s else "")
    line += f"  ·  pods started {snap['pods_started']}"
    pool = Table(title="pool", title_justify="left", expand=False)
    for col in ("pod", "parent", "gen", "learning rate", "round steps", "running"):
        pool.add_column(col)
    for pod in snap["in_flight"]:
        lr = pod["hparams"].get("learning_rate")
        pool.add_row(
            pod["pod_id"],
            pod["parent_id"] or "fresh",
            str(pod["generation"]),
            f"{lr:.2e}" if lr is not None else "-",
            f"{pod['round_steps']:,}",
            f"{pod['running_s']:.0f} s",
        )
    board = Table(title="leaderboard", title_justify="left", expand=False)
    for col in ("rank", "pod", "parent", "gen", "score", "valid sharpe", "env-steps"):
        board.add_column(col)
    for entry in snap["leaderboard"]:
        sharpe = (entry.get("metrics") or {}).get("sharpe_ratio")
        board.add_row(
            str(entry["rank"]),
            entry["pod_id"],
            entry["parent_id"] or "fresh",
            str(entry["generation"]),
            f"{entry['score']:.3f}",
            "-" if sharpe is None else f"{sharpe:.3f}",
            f"{entry['env_steps']:,}",
        )
    return Group(line, pool, board)


def tournament_line(result: Any) -> str:
    """The one-line result of ``podracer train --tournament`` (``result``: a ``TournamentResult``)."""
    champion = result.champion
    best = (
        "no pod was scored"
        if champion is None
        else f"champion {champion['pod_id']} score {champion['score']:.3f}"
    )
    return (
        f"tournament {result.run_id}: {result.pods_tried} pods scored ({result.pods_failed} failed), "
        f"{result.env_steps:,} env-steps, {best}\n  saved {result.run_dir}"
    )


# --- backtest -------------------------------------------------------------------------------------------
_PERCENT = {
    "cum_returns_final",
    "annual_return",
    "annual_volatility",
    "max_drawdown",
    "turnover",
    "costs_paid",
    "exposure",
    "hit_rate",
    "alpha",
}
_ROWS = (
    ("cum_returns_final", "Cumulative return"),
    ("annual_return", "Annual return"),
    ("annual_volatility", "Annual volatility"),
    ("sharpe_ratio", "Sharpe"),
    ("sortino_ratio", "Sortino"),
    ("max_drawdown", "Max drawdown"),
    ("calmar_ratio", "Calmar"),
    ("turnover", "Turnover / day"),
    ("costs_paid", "Costs paid"),
    ("exposure", "Exposure"),
    ("hit_rate", "Hit rate (days)"),
    ("probabilistic_sharpe_ratio", "PSR"),
    ("beta", "Beta to buy-and-hold"),
    ("alpha", "Jensen's alpha (annual)"),
    ("information_ratio", "Information ratio"),
)


def _fmt(key: str, value: float | None) -> str:
    if value is None:
        return "—"
    if key in _PERCENT:
        return (
            f"{100 * value:+.2f}%"
            if key in ("cum_returns_final", "annual_return", "alpha")
            else f"{100 * value:.2f}%"
        )
    return f"{value:.3f}" if key == "probabilistic_sharpe_ratio" else f"{value:.2f}"


def _short_window(doc: MetricsDocument) -> str | None:
    """``"n/a: window under 63 sessions"`` when annualized compounding figures are withheld."""
    minimum = doc.annualized_min_sessions
    sessions = doc.num_sessions if doc.num_sessions is not None else doc.num_days
    if minimum is not None and sessions is not None and sessions < minimum:
        return f"n/a: window under {minimum} sessions"
    return None


def _row_label(key: str, label: str, doc: MetricsDocument) -> str:
    short = _short_window(doc)
    return f"{label} ({short})" if short and key in ANNUALIZED_KEYS else label


def backtest_table(doc: MetricsDocument, title: str) -> Table:
    """The metrics document as a rich table: one column per strategy, benchmark marked."""
    strategies = doc.strategies
    table = Table(title=title, caption=_caption(doc), title_justify="left", caption_justify="left")
    table.add_column("metric")
    for name in strategies:
        label = f"{name} (benchmark)" if name == doc.benchmark else name
        table.add_column(label, justify="right")
    for key, label in _ROWS:
        table.add_row(_row_label(key, label, doc), *(_fmt(key, row.get(key)) for row in strategies.values()))
    return table


def costs_text(doc: MetricsDocument) -> str:
    """``"costs 0.20% + 1 bp"`` from the document's recorded costs (``"costs on"`` for old documents)."""
    return report.costs_label(doc.cost_rate, doc.slippage_bps) + doc.execution_text()


def _verdict_lines(doc: MetricsDocument) -> str:
    """The verdict the document states (``backtests.verdict``) and its selection diagnostics, each on a
    line of its own, then the capacity curve (``backtests.capacity``), or nothing."""
    verdict = stated_verdict(doc)
    text = "".join(f"\n{line}" for line in verdict.lines) if verdict is not None else ""
    text += "".join(f"\n{line}" for line in ranker_lines(doc))
    return text + "".join(f"\n{line}" for line in curve_lines(doc))


#: The ranker baselines the selected strategy's excess is printed against, with their names in words.
RANKER_LABELS: dict[str, str] = {"linear": "the linear baseline", "boosted": "the boosted baseline"}


def ranker_lines(doc: MetricsDocument) -> list[str]:
    """The selected strategy's excess over each ranker baseline (``backtests.linear``,
    ``backtests.boosted``) as a figure: the mean daily excess and its one-sided p-value after the
    looks (not a condition of the verdict); none for a baseline the document has no such test of."""
    oos = doc.oos_test
    lines = []
    for name, words in RANKER_LABELS.items():
        excess = oos.excess.get(name) if oos is not None else None
        if excess is None or excess.mean_per_day is None:
            continue
        p = excess.p_value_after_looks if excess.p_value_after_looks is not None else excess.p_value
        p_text = "n/a" if p is None else prob_text(p, excess.p_value_bound is True)
        lines.append(
            f"excess over {words} {100 * excess.mean_per_day:+.2f}%/day (p {p_text}; "
            "a figure beside the verdict, not a condition of it)"
        )
    return lines


def _caption(doc: MetricsDocument) -> str:
    text = (
        f"{doc.window} window {doc.start} .. {doc.end} ({doc.num_days} sessions, "
        f"{doc.num_decisions} decisions every {doc.decision_interval} x {doc.interval} bars); "
        f"daily returns annualized with {doc.annualization}/yr; {costs_text(doc)}; "
        f"{doc.num_trials} trial(s) tried"
    )
    return text + _verdict_lines(doc)


# --- demo -----------------------------------------------------------------------------------------------
_SUMMARY_ROWS = (
    ("sharpe_ratio", "Sharpe", "{:.2f}"),
    ("max_drawdown", "Max drawdown", "{:.2%}"),
    ("calmar_ratio", "Calmar", "{:.2f}"),
    ("annual_return", "Annual return", "{:.2%}"),
    ("cum_returns_final", "Cumulative return", "{:.2%}"),
    ("annual_volatility", "Annual volatility", "{:.2%}"),
    ("costs_paid", "Costs paid (of initial value)", "{:.2%}"),
    ("probabilistic_sharpe_ratio", "Probabilistic Sharpe (PSR)", "{:.3f}"),
    ("beta", "Beta to buy-and-hold", "{:.2f}"),
    ("alpha", "Jensen's alpha (annual)", "{:.2%}"),
    ("information_ratio", "Information ratio (excess over buy-and-hold)", "{:.2f}"),
)


def demo_table(doc: MetricsDocument) -> Table:
    """The demo's summary: champion vs buy-and-hold (and equal weight) on the held-out test window."""
    none = StrategyMetrics()
    champ = doc.strategies.get("champion") or none
    bench = doc.figures_of(doc.benchmark or "buy_and_hold") or none
    table = Table(
        title="podracer demo: champion vs buy-and-hold on the held-out test window", title_justify="left"
    )
    table.add_column("metric")
    table.add_column("champion", justify="right")
    table.add_column("buy-and-hold", justify="right")
    equal = doc.strategies.get("equal_weight")
    if equal is not None:
        table.add_column("equal weight (daily rebalance)", justify="right")
    linear = doc.strategies.get("linear")
    if linear is not None:
        table.add_column("linear (ridge, top quintile)", justify="right")
    boosted = doc.strategies.get("boosted")
    if boosted is not None:
        table.add_column("boosted (LightGBM, top quintile)", justify="right")
    for key, label, fmt in _SUMMARY_ROWS:

        def cell(row: StrategyMetrics, key: str = key, fmt: str = fmt) -> str:
            value = row.get(key)
            return "n/a" if value is None else fmt.format(value)

        extra = [row for row in (equal, linear, boosted) if row is not None]
        cells = [cell(champ), cell(bench)] + [cell(row) for row in extra]
        table.add_row(_row_label(key, label, doc), *cells)
    return table


def demo_footer(result: dict[str, Any]) -> str:
    doc: MetricsDocument = result["document"]
    sessions = doc.num_sessions if doc.num_sessions is not None else doc.num_days
    text = (
        f"test window {doc.start} .. {doc.end} ({sessions} sessions), "
        f"daily returns annualized with {doc.annualization}/yr, {costs_text(doc)}; "
        f"{doc.num_trials} pods tried. Total {result['timings']['total_s']:.0f} s."
    )
    return text + _verdict_lines(doc)


def say(message: str) -> None:
    """A progress line on stderr (rich markup allowed; no highlighting of numbers)."""
    context.err_console.print(message, highlight=False)


# --- data ------------------------------------------------------------------------------------------
def data_report(report: dict, as_json: bool, title: str) -> None:
    """What `data synth|import|fetch` stored: a line and a per-ticker table (or the JSON report)."""
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    console = context.console
    console.print(
        f"{title}: {len(report['tickers'])} ticker(s) at {report['interval']}, "
        f"{report['files_written']} file(s) written, {report['files_unchanged']} unchanged "
        f"-> {context.home() / 'data' / 'bars'}",
        highlight=False,
    )
    if report.get("dropped_outside_hours"):
        console.print(
            f"dropped {report['dropped_outside_hours']} bar(s) outside regular hours", highlight=False
        )
    table = Table("ticker", "bars", "gaps filled")
    for ticker in report["tickers"]:
        table.add_row(ticker, str(report["bars"][ticker]), str(report["gaps_filled"][ticker]))
    console.print(table)


def fetch_summary(report: dict[str, Any], source: str) -> None:
    """`data fetch`'s report, then its chunk and rate-limit line."""
    chunks = report["chunks"]
    data_report(report, False, f"fetched ({source})")
    context.console.print(
        f"chunks: {chunks['fetched']} fetched, {chunks['skipped']} already stored, {chunks['failed']} failed; "
        f"{report['bars_fetched']:,} bars received"
        + (
            f"; rate limited {report['requests_throttled']} time(s), waited {report['waited_s']:.0f} s"
            if report["requests_throttled"]
            else ""
        ),
        highlight=False,
    )


def universe_changes(name: str, result: dict[str, Any]) -> None:
    """`data universe`: the members on as-of, then the joins and leaves."""
    console = context.console
    console.print(f"[bold]{name}[/] on {result['as_of']}: {len(result['members'])} members", highlight=False)
    console.print(" ".join(result["members"]), highlight=False)
    table = Table(
        "change", "date", "symbol", "name", title=f"joins and leaves {result['since']} .. {result['as_of']}"
    )
    for kind in ("joins", "leaves"):
        for row in result[kind]:
            table.add_row(kind[:-1], row["date"], row["symbol"], row["name"])
    console.print(table)


def store_info(summary: dict[str, Any]) -> None:
    """`data info`: per interval, the store's tickers and (with a universe) which members are stored."""
    console = context.console
    if not summary["intervals"]:
        console.print(f"no bars in {summary['root']} (try `podracer data synth` or `podracer data import`)")
        return
    for interval, part in summary["intervals"].items():
        console.print(
            f"[bold]{interval}[/]: {len(part['tickers'])} ticker(s), {part['sessions']} session(s) "
            f"{part['start']} .. {part['end']}, {part['rows']} rows, {part['gaps_filled']} gaps filled",
            highlight=False,
        )
        part_universe = summary.get("universe", {}).get(interval)
        if part_universe:
            console.print(
                f"universe {part_universe['universe']} on {part_universe['as_of']}: "
                f"{len(part_universe['stored'])} of {len(part_universe['members'])} members stored"
                + (f"; missing {', '.join(part_universe['missing'])}" if part_universe["missing"] else ""),
                highlight=False,
            )
        table = Table("ticker", "sessions", "start", "end", "rows", "gaps filled")
        for ticker, row in part["by_ticker"].items():
            table.add_row(
                ticker,
                str(row["sessions"]),
                row["start"],
                row["end"],
                str(row["rows"]),
                str(row["gaps_filled"]),
            )
        console.print(table)
