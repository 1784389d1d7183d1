"""Simulated nightly loops of the shadow book's whole decision rule (``app.nightly.shadow``) at its
default :class:`ShadowSettings`, on synthetic per-session returns.

A loop is ``--nights`` nights. Each night the session's returns of every challenger under test, of what
is in charge and of buy-and-hold are appended (``record_sessions``), the book judges (``judge``), a
promotion or a demotion is applied (``promote_in_book`` / ``demote_in_book``), challengers tested for
``max_sessions`` retire (``expire``), and the night's new challenger enters (``enter``: a bounded book
of ``slots``, the oldest non-promising one retiring, every entry taking its share of the level), in the
order ``shadow.shadow_night`` runs them. Every decision is made by those functions; only the returns
are synthetic. Daily returns: buy-and-hold is a market factor (drift 0.03%/day, scale 1%); a
challenger is the market plus its own excess of scale 1% (so its returns and buy-and-hold's are
correlated), both drawn in the case's shape: ``normal``, ``student_t3``, ``left_skewed``
(``-(Exp(1) - 1)``) or ``ar1`` (phi 0.2), as in ``benchmarks/anytime_size.py``.

- **null**: no challenger has an edge over buy-and-hold; a loop's false promotion is any promotion
  within the nights. The one-sided 95% Clopper-Pearson bound of the rate must be at most the level.
- **planted**: every challenger's excess carries a daily information ratio (``--edges``; the demo's
  champion: 8.90 annualized, 0.56 a day): nights until the loop's first promotion.
- **switch**: a champion in charge from the first night (the book follows it, as it follows the
  registry) with a daily information ratio of ``--champion-edge`` until night ``--switch-night``, then
  ``--after-edges`` (0: the edge gone; negative: it loses); the challengers have none. Nights from
  the switch to its demotion, and how often a champion whose edge stays is demoted (by the test or by
  the drawdown limit).

    .venv/bin/python benchmarks/shadow_loop.py                      # 200 loops per null shape
    .venv/bin/python benchmarks/shadow_loop.py --loops 200 --json
    .venv/bin/python benchmarks/shadow_loop.py --cases switch     # the champion's demotion only

Prints a table (or one JSON document); exits 1 when a null shape's upper bound exceeds the level.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from app.nightly import shadow  # noqa: E402
from app.nightly.shadow import BookDecision, ShadowBook, ShadowSettings  # noqa: E402
from backtests import anytime  # noqa: E402
from benchmarks.anytime_size import SHAPES, noise, upper_bound  # noqa: E402

SCALE = 0.01
MARKET_DRIFT = 0.0003
#: The demo champion's information ratio to buy-and-hold (8.90 annualized, docs/benchmarks.md), a day.
DEMO_IR = round(8.90 / math.sqrt(252), 2)
INCUMBENT = "incumbent"
FIRST_DAY = np.datetime64("2030-01-01")
CASES = ("null", "planted", "switch")


def session_dates(nights: int) -> list[str]:
    """ISO dates of the sessions, one a night (and the day before the first)."""
    return [str(FIRST_DAY + np.timedelta64(i - 1, "D")) for i in range(nights + 1)]


@dataclass(frozen=True)
class Case:
    """One scenario: the returns' shape, each challenger's daily information ratio, and an incumbent
    champion's (None: none in charge at the start) with its switch night and its edge after."""

    shape: str
    edge: float = 0.0
    champion_edge: float | None = None
    switch_night: int = 0
    after_edge: float = 0.0
    stop_at: str = "promotion"
    """a loop is done at its first "promotion", at the champion's "demotion", or "never" (runs on)"""


@dataclass
class Loop:
    """One simulated loop: its book, its returns (challenger ``j`` enters night ``j``), its outcomes."""

    book: ShadowBook
    returns: np.ndarray
    benchmark: np.ndarray
    incumbent: np.ndarray | None
    promotions: list[int] = field(default_factory=list)
    demotions: list[tuple[int, str, str]] = field(default_factory=list)
    """(night, "test" or "drawdown", the champion demoted)"""
    done: bool = False

    def series(self, run_id: str) -> np.ndarray:
        return self.incumbent if run_id == INCUMBENT else self.returns[:, int(run_id[1:])]


def make_loop(case: Case, nights: int, seed: int, index: int) -> Loop:
    """Loop ``index`` of ``case``: seeded by ``(seed, shape, edges, index)``, whatever the batch."""
    key = [seed, SHAPES.index(case.shape), round(case.edge * 1000), index]
    if case.champion_edge is not None:
        key += [1 + round(case.champion_edge * 1000), case.switch_night, 1000 + round(case.after_edge * 1000)]
    rng = np.random.default_rng(key)
    if case.shape == "beta_1.5":  # a strategy of beta 1.5 and no alpha on a normal market
        market = rng.normal(MARKET_DRIFT, SCALE, nights)
        returns = 1.5 * market[:, None] + rng.normal(0.0, SCALE, (nights, nights)) + case.edge * SCALE
    else:
        market = noise(case.shape, rng, nights, 1)[:, 0] + MARKET_DRIFT
        returns = market[:, None] + noise(case.shape, rng, nights, nights) + case.edge * SCALE
    book, incumbent = ShadowBook(), None
    if case.champion_edge is not None:
        edge = np.where(np.arange(nights) < case.switch_night, case.champion_edge, case.after_edge)
        incumbent = market + noise(case.shape, rng, nights, 1)[:, 0] + edge * SCALE
        book = shadow.follow_champion(book, INCUMBENT, "", session_dates(nights)[0])
    return Loop(book, returns, market, incumbent)


def record(loop: Loop, night: int, date: str) -> None:
    """Append the night's session to the book (``shadow.record_sessions``)."""
    book = loop.book
    champion = None if book.champion is None else [float(loop.series(book.champion.run_id)[night])]
    challengers = {ch.run_id: [float(loop.series(ch.run_id)[night])] for ch in book.challengers}
    loop.book = shadow.record_sessions(book, [date], challengers, champion, [float(loop.benchmark[night])])


def decide(
    book: ShadowBook, newcomer: str, date: str, settings: ShadowSettings
) -> tuple[ShadowBook, BookDecision]:
    """The rest of the night, as ``shadow.shadow_night`` runs it: judge, promote or demote, expire,
    enter the night's challenger."""
    decision = shadow.judge(book, settings)
    if decision.promote is not None:
        book = shadow.promote_in_book(book, decision.promote)
    elif decision.demote is not None:
        book = shadow.demote_in_book(book, decision.demote)
    book = shadow.expire(book, settings)
    book, _, _ = shadow.enter(book, newcomer, date, "", settings)
    return book, decision


class Evaluations:
    """``anytime.betting_log_wealth`` for many loops at once.

    The rule's cost is the e-process: ``judge`` and ``enter`` recompute each challenger's whole path
    every night, a Python loop over its sessions per stream. Run one night of every loop first with
    this stand-in for ``anytime.betting_log_wealth``: it answers the streams already computed and
    notes the others (answering zeros); those are then computed in one call of the real function,
    streams of one betting setting as columns padded at the end with NaN (a NaN session stakes nothing and the path is
    causal, so each column's values are the stream's own), and the nights that met a new stream run
    again. A night counts only when it ran on computed values throughout, so its decisions are
    exactly the unbatched rule's (``tests/test_shadow_loop.py`` compares the two)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.known: dict[tuple[anytime.Betting, bytes], np.ndarray] = {}
        self.wanted: dict[tuple[anytime.Betting, bytes], np.ndarray] = {}

    def __call__(self, excess: Any, settings: anytime.Betting = anytime.BETTING) -> np.ndarray:
        x = np.asarray(excess, dtype=np.float64)
        if x.ndim != 1 or not len(x):
            return self.real(x, settings)
        key = (settings, x.tobytes())
        found = self.known.get(key)
        if found is None:
            self.wanted[key] = x
            return np.zeros(len(x))
        return found

    def prefetch(self, book: ShadowBook, settings: ShadowSettings) -> None:
        """Note the streams tonight's rule reads (each challenger's excess over what is in charge and
        over buy-and-hold, the champion's demotion stream), so most nights run once."""
        for ch in book.challengers:
            r, charge, bench = (
                np.asarray(v, dtype=np.float64) for v in (ch.returns, ch.in_charge, ch.benchmark)
            )
            start = ch.charge_from
            self(anytime.alpha_difference(r[start:], charge[start:], bench[start:]))
            self(anytime.alpha_excess(r, bench))
        if book.champion is not None and book.champion.dates:
            tenure = book.champion
            excess = anytime.alpha_excess(
                np.asarray(tenure.returns, dtype=np.float64), np.asarray(tenure.benchmark, dtype=np.float64)
            )
            self(float(settings.demotion_margin) - excess, anytime.DEMOTION_BETTING)

    def compute(self) -> None:
        """Compute the noted streams in one call of the real e-process per betting setting."""
        groups: dict[anytime.Betting, list[tuple[bytes, np.ndarray]]] = {}
        for (betting, key), x in self.wanted.items():
            groups.setdefault(betting, []).append((key, x))
        for betting, streams in groups.items():
            longest = max(len(x) for _, x in streams)
            matrix = np.full((longest, len(streams)), np.nan)
            for j, (_, x) in enumerate(streams):
                matrix[: len(x), j] = x
            wealth = self.real(matrix, betting)
            for j, (key, x) in enumerate(streams):
                self.known[(betting, key)] = wealth[: len(x), j].copy()
        self.wanted.clear()

    def forget(self) -> None:
        self.known.clear()


@contextmanager
def batched() -> Iterator[Evaluations]:
    """``anytime.betting_log_wealth`` replaced by an :class:`Evaluations` while the block runs."""
    evaluations = Evaluations(anytime.betting_log_wealth)
    with mock.patch.object(anytime, "betting_log_wealth", evaluations):
        yield evaluations


def _outcome(loop: Loop, night: int, decision: BookDecision, case: Case) -> None:
    if decision.promote is not None:
        loop.promotions.append(night)
        loop.done = loop.done or case.stop_at == "promotion"
    if decision.promote is None and decision.demote is not None:
        reason = "drawdown" if "drawdown" in decision.demote.reason else "test"
        loop.demotions.append((night, reason, decision.demote.run_id))
        loop.done = loop.done or case.stop_at == "demotion"
    if case.stop_at == "demotion" and decision.promote is not None and loop.book.champion is not None:
        loop.done = True  # a challenger replaced the incumbent: no demotion to time


def run_case(
    case: Case, *, loops: int, nights: int, seed: int, settings: ShadowSettings, batch: bool = True
) -> list[Loop]:
    """Simulate ``loops`` loops of ``case`` for ``nights`` nights (all loops in step, night by night;
    ``batch=False`` runs the rule unbatched, for the comparison test)."""
    sims = [make_loop(case, nights, seed, i) for i in range(loops)]
    dates = session_dates(nights)
    if not batch:
        for loop in sims:
            for night in range(1, nights + 1):
                record(loop, night - 1, dates[night])
                loop.book, decision = decide(loop.book, f"c{night - 1:04d}", dates[night], settings)
                _outcome(loop, night, decision, case)
                if loop.done:
                    break
        return sims
    with batched() as evaluations:
        for night in range(1, nights + 1):
            active = [loop for loop in sims if not loop.done]
            if not active:
                break
            for loop in active:
                record(loop, night - 1, dates[night])
                evaluations.prefetch(loop.book, settings)
            evaluations.compute()
            pending = active
            while pending:
                again = []
                for loop in pending:
                    before = len(evaluations.wanted)
                    book, decision = decide(loop.book, f"c{night - 1:04d}", dates[night], settings)
                    if len(evaluations.wanted) > before:
                        again.append(loop)
                        continue
                    loop.book = book
                    _outcome(loop, night, decision, case)
                evaluations.compute()
                pending = again
            evaluations.forget()
    return sims


def _quantiles(nights_to: list[float]) -> tuple[float, float]:
    values = np.asarray(nights_to, dtype=np.float64)
    return (
        float(np.quantile(values, 0.5, method="inverted_cdf")),
        float(np.quantile(values, 0.9, method="inverted_cdf")),
    )


def null_row(shape: str, sims: list[Loop], level: float) -> dict[str, Any]:
    count = sum(bool(s.promotions) for s in sims)
    bound = upper_bound(count, len(sims))
    return {
        "shape": shape,
        "loops": len(sims),
        "false_promotions": count,
        "rate": count / len(sims),
        "upper_bound_95": bound,
        "passed": bound <= level,
        "entries_per_loop": float(np.mean([s.book.entries for s in sims])),
    }


def planted_row(edge: float, sims: list[Loop]) -> dict[str, Any]:
    nights_to = [s.promotions[0] if s.promotions else math.inf for s in sims]
    median, p90 = _quantiles(nights_to)
    return {
        "daily_information_ratio": edge,
        "loops": len(sims),
        "promoted_share": float(np.mean([bool(s.promotions) for s in sims])),
        "median_nights": median,
        "p90_nights": p90,
    }


def switch_row(case: Case, sims: list[Loop], nights: int) -> dict[str, Any]:
    """Demotion after the switch (or, for a champion whose edge stays, the false-demotion rate)."""
    first = [next((d for d in s.demotions if d[2] == INCUMBENT), None) for s in sims]
    early = sum(d is not None and d[0] <= case.switch_night for d in first)
    after = [
        d[0] - case.switch_night if d is not None and d[0] > case.switch_night else math.inf for d in first
    ]
    median, p90 = _quantiles(after)
    replaced = sum(
        bool(s.promotions) and (d is None or s.promotions[0] < d[0]) for s, d in zip(sims, first, strict=True)
    )
    return {
        "champion_edge": case.champion_edge,
        "switch_night": case.switch_night,
        "edge_after": case.after_edge,
        "loops": len(sims),
        "demoted_before_switch": early,
        "false_demotion_upper_bound_95": upper_bound(early, len(sims)),
        "demoted_after_switch_share": float(np.mean(np.isfinite(after))),
        "median_nights_to_demotion": median,
        "p90_nights_to_demotion": p90,
        "by_test": sum(d is not None and d[1] == "test" for d in first),
        "by_drawdown": sum(d is not None and d[1] == "drawdown" for d in first),
        "replaced_by_a_challenger": replaced,
        "nights": nights,
    }


def _progress(row: dict[str, Any], seconds: dict[str, float]) -> None:
    """Each case's row on stderr as it is done (a long run's partial figures)."""
    print(json.dumps({**row, "seconds_so_far": sum(seconds.values())}), file=sys.stderr, flush=True)


def measure(args: argparse.Namespace, settings: ShadowSettings) -> dict[str, Any]:
    """The null rows (one per shape), the planted rows (one per edge), the switch rows."""
    kw = {"nights": args.nights, "seed": args.seed, "settings": settings}
    null, planted, switch, seconds = [], [], [], {}
    for shape in args.shapes if "null" in args.cases else ():
        started = time.perf_counter()
        sims = run_case(Case(shape), loops=args.loops, **kw)
        null.append(null_row(shape, sims, settings.level))
        seconds[f"null {shape}"] = round(time.perf_counter() - started, 1)
        _progress(null[-1], seconds)
    for edge in args.edges if "planted" in args.cases else ():
        started = time.perf_counter()
        sims = run_case(Case("student_t3", edge=edge), loops=args.power_loops, **kw)
        planted.append(planted_row(edge, sims))
        seconds[f"planted {edge}"] = round(time.perf_counter() - started, 1)
        _progress(planted[-1], seconds)
    stays = Case("student_t3", champion_edge=args.champion_edge, switch_night=args.nights, stop_at="never")
    switches = [
        *(
            Case("student_t3", champion_edge=args.champion_edge, switch_night=args.switch_night, after_edge=a)
            for a in args.after_edges
        ),
        stays,
    ]
    for case in switches if "switch" in args.cases else ():
        started = time.perf_counter()
        sims = run_case(case, loops=args.power_loops, **kw)
        switch.append(switch_row(case, sims, args.nights))
        seconds[f"switch {case.after_edge if case is not stays else 'stays'}"] = round(
            time.perf_counter() - started, 1
        )
        _progress(switch[-1], seconds)
    return {"null": null, "planted": planted, "switch": switch, "seconds": seconds}


def _print_table(doc: dict[str, Any]) -> None:
    print(f"false promotions over {doc['nights']} nights, level {doc['settings']['level']:g}")
    for r in doc["null"]:
        print(
            f"  {r['shape']:>12}: {r['false_promotions']:>4} / {r['loops']} ({r['rate']:.1%}), 95% upper "
            f"bound {r['upper_bound_95']:.2%}, {r['entries_per_loop']:.1f} entries a loop"
        )
    print("nights to the first promotion (Student-t(3) excess)")
    for r in doc["planted"]:
        print(
            f"  IR {r['daily_information_ratio']:.2f}/day: promoted {r['promoted_share']:.0%}, median "
            f"{r['median_nights']:g}, 90th percentile {r['p90_nights']:g}"
        )
    print("champion's demotion (edge switched at the night shown; 'stays': never switched)")
    for r in doc["switch"]:
        after = (
            "stays" if r["switch_night"] >= r["nights"] else f"{r['edge_after']:+.2f} at {r['switch_night']}"
        )
        print(
            f"  IR {r['champion_edge']:.2f} -> {after}: demoted before the switch {r['demoted_before_switch']}"
            f"/{r['loops']} (95% bound {r['false_demotion_upper_bound_95']:.1%}), after it {r['demoted_after_switch_share']:.0%} (median "
            f"{r['median_nights_to_demotion']:g}, 90th percentile {r['p90_nights_to_demotion']:g} nights; "
            f"test {r['by_test']}, drawdown {r['by_drawdown']}), replaced {r['replaced_by_a_challenger']}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loops", type=int, default=200, help="loops per null shape (at least 200)")
    p.add_argument("--power-loops", type=int, default=100, help="loops per planted and switch case")
    p.add_argument("--nights", type=int, default=250)
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    p.add_argument("--edges", type=float, nargs="+", default=[0.2, 0.3, 0.5, DEMO_IR, 0.8], help="daily IRs")
    p.add_argument("--champion-edge", type=float, default=DEMO_IR, help="the champion's daily IR before")
    p.add_argument("--switch-night", type=int, default=60)
    p.add_argument("--after-edges", type=float, nargs="+", default=[0.0, -0.2, -0.5])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--demotion-half-life",
        type=float,
        default=anytime.DEMOTION_HALF_LIFE,
        help="the demotion bet's half-life in sessions (0: the promotion bet's, on the whole tenure)",
    )
    p.add_argument(
        "--cases", nargs="+", default=list(CASES), choices=CASES, help="which parts to run (default: all)"
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    settings = ShadowSettings()
    demotion = (
        dataclasses.replace(anytime.DEMOTION_BETTING, half_life=args.demotion_half_life)
        if args.demotion_half_life
        else anytime.BETTING
    )
    started = time.perf_counter()
    with mock.patch.object(anytime, "DEMOTION_BETTING", demotion):
        figures = measure(args, settings)
    failed = [r for r in figures["null"] if not r["passed"]]
    doc = {
        "nights": args.nights,
        "loops": args.loops,
        "power_loops": args.power_loops,
        "settings": dataclasses.asdict(settings),
        "betting": dataclasses.asdict(anytime.BETTING),
        "demotion_betting": dataclasses.asdict(demotion),
        "scale": SCALE,
        "market_drift": MARKET_DRIFT,
        "seed": args.seed,
        **figures,
        "passed": not failed,
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_table(doc)
        print("passed" if not failed else f"FAILED: {len(failed)} shape(s) above the level")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
