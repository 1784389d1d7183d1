"""The verdict has one home, ``backtests.verdict``: its rule at the edges, the thresholds defined
nowhere else, the round trip through metrics.json, and an import without torch."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backtests import verdict as v
from backtests.verdict import Verdict, judge, stated_verdict, verdict_fields

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("app", "agents", "backtests", "data", "envs")
VERDICT_MODULE = ROOT / "backtests" / "verdict.py"
#: Names of the verdict's thresholds and of the annualization rule: any DSR_*/PBO_* constant counts.
THRESHOLD = re.compile(r"^(DSR|PBO)_[A-Z0-9_]+$|^ANNUALIZED_(MIN_SESSIONS|KEYS)$")


def _doc(dsr: float | None, pbo: float | None, **extra) -> dict:
    return {
        "benchmark": "buy_and_hold",
        "pbo": pbo,
        "strategies": {
            "champion": {"deflated_sharpe_ratio": dsr, "sharpe_ratio": 2.0},
            "buy_and_hold": {"deflated_sharpe_ratio": 0.4, "sharpe_ratio": 1.0},
        },
        **extra,
    }


# --- (a) the rule ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dsr", "pbo", "outcome", "text"),
    [
        (0.95, 0.49, "significant", "edge significant: DSR 0.950, PBO 0.49"),  # DSR exactly at the bar
        (0.95, None, "significant", "edge significant: DSR 0.950, PBO n/a"),  # no PBO: the DSR decides
        (0.9499, 0.1, "not significant", "edge not significant: DSR 0.950, PBO 0.10"),  # shown rounded
        (0.99, 0.5, "not significant", "edge not significant: DSR 0.990, PBO 0.50"),  # PBO exactly 0.5
        (0.99, 0.4999, "significant", "edge significant: DSR 0.990, PBO 0.50"),
        (0.99, 0.78, "not significant", "edge not significant: DSR 0.990, PBO 0.78"),
        (1.3e-11, 0.78, "not significant", "edge not significant: DSR 1.3e-11, PBO 0.78"),
    ],
)
def test_the_rule_at_its_edges(dsr, pbo, outcome, text):
    verdict = judge(_doc(dsr, pbo))
    assert verdict.outcome == outcome and verdict.text == text
    assert verdict.headline == f"edge {outcome}" and verdict.significant is (outcome == "significant")
    assert v.DSR_SIGNIFICANT == 0.95 and v.PBO_MAX == 0.5


def test_not_measurable_says_why_and_a_weaker_sharpe_is_a_reason():
    why = "every one of the 3 trials has an undefined validation Sharpe (all cash)"
    verdict = judge(_doc(None, 0.3, dsr_reason=why))
    assert verdict.outcome == "not measurable" and verdict.significant is None
    assert verdict.text == f"edge not measurable: DSR n/a ({why}), PBO 0.30"
    assert (
        judge(_doc(None, None)).text
        == "edge not measurable: DSR n/a (the Sharpe ratio is undefined), PBO n/a"
    )
    doc = _doc(0.97, 0.2)
    doc["strategies"]["champion"]["sharpe_ratio"] = 0.5
    verdict = judge(doc)
    assert verdict.outcome == "significant" and verdict.reasons == ("Sharpe 0.50 below buy_and_hold's 1.00",)
    assert verdict.text == "edge significant: DSR 0.970, PBO 0.20; Sharpe 0.50 below buy_and_hold's 1.00"
    assert judge(doc, "pod-9") is None


def test_the_stated_verdict_round_trips_through_metrics_json():
    verdict = Verdict(
        "not significant", ("DSR 0.003", "PBO 0.62"), ("Sharpe 0.50 below buy_and_hold's 1.00",)
    )
    doc = json.loads(json.dumps({**_doc(0.99, 0.1), **verdict_fields(verdict)}))
    assert doc["verdict"] == verdict.text and doc["verdict_outcome"] == "not significant"
    # What the document states wins over what its figures would give today.
    assert stated_verdict(doc) == verdict
    assert stated_verdict({**doc, **verdict_fields(None)}) is None
    # A document from before the verdict was stored: judged once, for its selected strategy.
    old = _doc(0.99, 0.1, deflated=["champion"], verdict="edge significant: DSR 0.990, PBO 0.10")
    assert stated_verdict(old) == judge(old) and stated_verdict(old).text == old["verdict"]
    assert stated_verdict({"strategies": {"champion": {"sharpe_ratio": 1.0}}}) is None  # before the DSR


def test_the_report_writes_the_verdict_of_the_rule():
    import torch

    from backtests import engine, report
    from data.toy import toy_market
    from envs.trading import EnvParams

    market = toy_market(num_steps=8 * 390, num_assets=3, num_features=2, seed=1)
    policy = lambda obs: torch.full((obs.shape[0], 3), 0.3)  # noqa: E731
    result = engine.run_backtest(market, EnvParams(decision_interval=30), {"champion": policy})
    doc = report.metrics_document(
        result, window="test", num_trials=5, trial_sharpes=[0.5, 1.0, -0.2, 2.0, 0.1]
    )
    verdict = judge(doc, "champion")
    assert doc["verdict"] == verdict.text and stated_verdict(doc) == verdict
    assert doc["verdict_outcome"] == verdict.outcome in v.OUTCOMES
    baselines_only = engine.run_backtest(market, EnvParams(decision_interval=30), baselines=("buy_and_hold",))
    assert stated_verdict(report.metrics_document(baselines_only, window="test")) is None


# --- (b) one definition ----------------------------------------------------------------------------
def _threshold_definitions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and THRESHOLD.match(name.id):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name.id}")
    return found


def test_verdict_thresholds_are_defined_only_in_the_verdict_module():
    elsewhere = [
        hit
        for pkg in PRODUCT
        for path in sorted((ROOT / pkg).rglob("*.py"))
        if path != VERDICT_MODULE
        for hit in _threshold_definitions(path)
    ]
    assert not elsewhere, "verdict thresholds defined outside backtests/verdict.py:\n" + "\n".join(elsewhere)
    # The scan sees the definitions where they belong (it is not looking at nothing).
    own = {hit.split()[-1] for hit in _threshold_definitions(VERDICT_MODULE)}
    assert own == {"DSR_SIGNIFICANT", "PBO_MAX", "ANNUALIZED_MIN_SESSIONS", "ANNUALIZED_KEYS"}


# --- (c) no torch ----------------------------------------------------------------------------------
def test_the_verdict_imports_without_torch():
    code = (
        "import sys; import backtests.verdict, app.dashboard.verdict_box; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
