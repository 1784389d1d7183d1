"""A shortened simulated year (benchmarks/soak.py): eleven nights of nightly update, retrain and prune,
and paper sessions, with every fault kind injected once on a seeded schedule; then the year's
invariants (no bar lost or doubled, one order per client id, the books reconcile, one alert and one
clear per fault that leaves a problem and none for the rest, the disk within [retention], promotion
still gated). The full year:
``python benchmarks/soak.py --nights 250`` (docs/benchmarks.md)."""

from __future__ import annotations

from benchmarks.soak import ALERTS, FAULTS, fault_schedule, run_soak


def test_fault_schedule_is_seeded_and_covers_every_kind():
    plan = fault_schedule(11, seed=0)
    assert plan == fault_schedule(11, seed=0) != fault_schedule(11, seed=1)
    assert 0 not in plan
    assert {k for kinds in plan.values() for k in kinds} == set(FAULTS)


def test_eleven_nights_with_every_fault(tmp_path):
    report = run_soak(tmp_path / "home", nights=11, cycles=3, seed=0)
    assert all(report["faults_injected"][kind] >= 1 for kind in FAULTS), report["faults_injected"]
    assert report["bars_stored"] > 0 and report["broker_orders"] > 0
    n = report["faults_injected"]["outside_trade"]
    assert report["book_alerts"] == {"mismatch": n, "clear": n}
    # one alert and one clear through status and the hook per fault that leaves a problem, no other
    assert report["alerts"] == {
        key: {"problem": report["faults_injected"][kind], "clear": report["faults_injected"][kind]}
        for kind, key in ALERTS.items()
    }  # (eleven nights: no fault twice in a row)
    assert report["final_promotion"] == {"edge": "promoted", "noise": "rejected"}
    # the disk-full night's retrain failed (recorded, alerted); the killed one left no failure behind
    assert report["retrains"].get("failed", 0) == report["faults_injected"]["disk_full"]
