"""A shortened simulated year (benchmarks/soak.py): thirteen nights of nightly update, retrain and prune,
and paper sessions, with every fault kind injected once on a seeded schedule; then the year's
invariants (no bar lost or doubled, one order per client id, the books reconcile, one alert and one
clear per problem a fault opens and none for the rest, a real ``podracer paper`` process killed with
SIGKILL and restarted on its bar, the disk within [retention], promotion still gated). The promotion
at the end is the scripted one here (the gate's rule on given scores); the full year,
``python benchmarks/soak.py --nights 250`` (docs/benchmarks.md), ends with two real retrains
(benchmarks/soak_promotion.py: a planted edge promoted, noise not)."""

from __future__ import annotations

from benchmarks.soak import ALERTS, FAULTS, fault_schedule, run_soak


def test_fault_schedule_is_seeded_and_covers_every_kind():
    plan = fault_schedule(13, seed=0)
    assert plan == fault_schedule(13, seed=0) != fault_schedule(13, seed=1)
    assert 0 not in plan and 12 not in plan
    assert {k for kinds in plan.values() for k in kinds} == set(FAULTS)


def test_thirteen_nights_with_every_fault(tmp_path):
    report = run_soak(tmp_path / "home", nights=13, cycles=3, seed=0)
    assert all(report["faults_injected"][kind] >= 1 for kind in FAULTS), report["faults_injected"]
    assert report["bars_stored"] > 0 and report["broker_orders"] > 0
    n = report["faults_injected"]["outside_trade"]
    assert report["book_alerts"] == {"mismatch": n, "clear": n}
    # one alert and one clear through status and the hook per problem the faults opened, no other; a
    # fault repeated while its problem is open (two disk-full nights in a row) is the same problem
    opened = report["problems_opened"]
    assert report["alerts"] == {key: {"problem": n, "clear": n} for key, n in opened.items()}
    for kind, key in ALERTS.items():
        assert 1 <= opened[key] <= report["faults_injected"][kind], (kind, opened, report["faults_injected"])
    # each paper process killed after its first order: the restart found that order, filled, once
    assert len(report["paper_kills"]) == report["faults_injected"]["paper_kill"] >= 1
    assert all(kill["after"] == "filled" for kill in report["paper_kills"])
    assert report["final_promotion"] == {"edge": "promoted", "noise": "rejected"}
    # the disk-full nights' retrains failed (recorded, alerted); the killed ones left no failure behind
    assert report["retrains"].get("failed", 0) == report["faults_injected"]["disk_full"]
