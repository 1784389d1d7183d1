"""What ``podracer walkforward`` shows: live progress (folds done, the current fold, ETA) and the summary
(one row per fold, the stitched account against the baselines, time per fold and in all, peak RSS)."""

from __future__ import annotations

import time
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app import context
from app.render import backtest_table
from app.walkforward.record import FoldRecord


class WalkForwardProgress:
    """A rich progress display fed by ``run_walkforward``'s events; the ETA is the mean time of the
    folds finished in this session times the folds left."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.progress: Any = None
        self.fold_times: list[float] = []
        self.fold_started = time.monotonic()

    def __enter__(self) -> Any:
        if self.enabled:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                console=context.err_console,
                transient=False,
            )
            self.progress.start()
            self.folds = self.progress.add_task("folds", total=None, info="loading the market")
            self.pods = self.progress.add_task("fold", total=None, info="")
        return self.on_event

    def on_event(self, event: dict[str, Any]) -> None:
        """Show one event of the walk-forward."""
        if self.progress is None:
            return
        kind = event.get("event")
        if kind == "start":
            self.progress.update(self.folds, total=event["folds"], completed=event["done"], info="")
            self.fold_started = time.monotonic()
        elif kind == "stage":
            index = event.get("index")
            label = "report" if index is None else f"fold {index}: {event['stage']}"
            self.progress.reset(self.pods, total=None, description=label, info="")
        elif kind == "pods":
            snap = event["snapshot"]
            scored = sum(1 for _ in snap.get("leaderboard") or ())
            total = snap.get("budget_steps")
            self.progress.update(
                self.pods,
                total=total,
                completed=min(total or 0, snap["env_steps_spent"]) if total else None,
                info=f"{snap['pods_started']} pods started, board {scored}, {snap['wall_s']:.0f} s",
            )
        elif kind == "fold_done":
            now = time.monotonic()
            self.fold_times.append(now - self.fold_started)
            self.fold_started = now
            task = self.progress.tasks[self.folds]
            left = (task.total or 0) - task.completed - 1
            eta = sum(self.fold_times) / len(self.fold_times) * max(0, left)
            record: FoldRecord = event["record"]
            self.progress.update(
                self.folds,
                advance=1,
                info=f"last: {'promoted' if record.promoted else 'kept'}, test return "
                f"{_pct(record.test.period_return)} · ETA {eta / 60:.1f} min",
            )

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.2f}%"


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if value is None else fmt.format(value)


def folds_table(records: list[FoldRecord]) -> Table:
    """One row per fold: windows, pods tried, gate, policy in charge, test figures, seconds."""
    table = Table(title="walk-forward folds", title_justify="left")
    for name in ("fold", "test window", "pods", "gate Sharpe", "gate", "in charge", "test return",
                 "b&h return", "test Sharpe", "costs $", "seconds"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("test window", "gate", "in charge") else "right")
    for r in records:
        test = r.test
        table.add_row(
            str(r.index),
            " .. ".join(r.test_window()),
            str(r.pods_tried),
            _num(r.gate.challenger.sharpe_ratio),
            "promoted" if r.promoted else "kept",
            r.in_charge_label(),
            _pct(test.period_return),
            _pct(test.buy_and_hold_return),
            _num(test.sharpe_ratio),
            _num(test.costs_paid, "{:,.0f}"),
            _num(r.seconds.get("total"), "{:.0f}"),
        )
    return table


def walkforward_summary(result: Any) -> None:
    """Print the folds, the stitched account against the baselines, the verdict and the timings."""
    console = context.console
    console.print(folds_table(result.folds))
    console.print(backtest_table(result.metrics, "stitched out-of-sample account (one look at the span)"))
    times = [float(r.seconds.get("total") or 0.0) for r in result.folds]
    mean = sum(times) / len(times) if times else 0.0
    console.print(
        f"{len(result.folds)} folds in {result.seconds:.0f} s (this session; {mean:.0f} s per fold on average); "
        f"peak RSS {result.peak_rss_mb['self']:,.0f} MB (largest worker {result.peak_rss_mb['children']:,.0f} MB)"
        f"\n  saved {result.run_dir}",
        highlight=False,
    )


def walkforward_json(result: Any) -> dict[str, Any]:
    """``--json``: the run, the folds' rows, the stitched account's figures and verdict, the timings."""
    doc = result.metrics
    return {
        "run_id": result.run_id,
        "run_dir": str(result.run_dir),
        "seconds": result.seconds,
        "peak_rss_mb": result.peak_rss_mb,
        "walkforward": doc.walkforward.model_dump() if doc.walkforward is not None else None,
        "strategies": {name: figures.model_dump() for name, figures in doc.strategies.items()},
        "verdict": doc.verdict,
        "start": doc.start,
        "end": doc.end,
    }
