"""The verdict has one home, ``backtests.verdict``: its rule at the edges (three outcomes), the level
and the thresholds defined nowhere else, the round trip through metrics.json, and an import without
torch or the statistics libraries."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backtests import verdict as v
from backtests.metrics import TRADING_DAYS_PER_YEAR
from backtests.metrics_model import MetricsDocument
from backtests.verdict import EdgeVerdict, judge, stated_verdict, verdict_fields

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("app", "agents", "backtests", "data", "envs")
VERDICT_MODULE = ROOT / "backtests" / "verdict.py"
#: Names of the verdict's level and thresholds (and of the retired DSR_*/PBO_* ones, which must not
#: come back anywhere) and of the annualization rule.
THRESHOLD = re.compile(
    r"^(DSR|PBO)_[A-Z0-9_]+$|^(SIGNIFICANCE_LEVEL|MIN_OOS_SESSIONS)$|^ANNUALIZED_(MIN_SESSIONS|KEYS)$"
)


def _doc(
    psr: float | None,
    p: float | None,
    *,
    mean: float = 0.004,
    sessions: int = 63,
    looks: int = 1,
    level: float | None = 0.05,
    **oos,
) -> dict:
    """A metrics document whose champion's out-of-sample test reads ``psr`` (after the looks) and
    ``p`` (the benchmark test's p-value after the looks)."""
    block = {
        "strategy": "champion",
        "held_out": True,
        "num_sessions": sessions,
        "looks": looks,
        "psr_after_looks": psr,
        "benchmark": "buy_and_hold",
        "excess": {"buy_and_hold": {"mean_per_day": mean, "p_value_after_looks": p}},
        "looks_note": None,
        "reason": None,
        **oos,
    }
    doc = {
        "window": "test",
        "benchmark": "buy_and_hold",
        "pbo": 0.78,
        "oos_test": block,
        "strategies": {"champion": {}},
    }
    if level is not None:
        doc["significance_level"] = level
    return doc


def _m(raw: dict) -> MetricsDocument:
    """The document ``raw`` (its JSON) as the verdict reads it: its model."""
    return MetricsDocument.parse(raw)


# --- (a) the rule ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("psr", "p", "level", "outcome"),
    [
        (0.95, 0.05, 0.05, "significant"),  # both exactly at the level: significant
        (0.9499, 0.01, 0.05, "not significant"),  # the Sharpe test falls short (shown rounded: 0.950)
        (0.999, 0.0501, 0.05, "not significant"),  # the benchmark test falls short
        (0.91, 0.09, 0.1, "significant"),  # a looser level set in the config
        (0.91, 0.09, None, "not significant"),  # no level recorded: the default 5%
        (1.0, 5e-4, 0.05, "significant"),
    ],
)
def test_the_rule_at_its_edges(psr, p, level, outcome):
    verdict = judge(_m(_doc(psr, p, level=level)))
    assert verdict.outcome == outcome and verdict.significant is (outcome == "significant")
    assert verdict.headline == f"edge {outcome} out of sample"
    assert v.SIGNIFICANCE_LEVEL == 0.05 and v.MIN_OOS_SESSIONS == 40


def test_a_document_that_names_the_level_significance_is_judged_at_its_level():
    """metrics.json called the level ``significance`` before ``significance_level``: such a document is
    judged at the level it recorded, not the default."""
    old = _doc(0.91, 0.09, level=None)
    old["significance"] = 0.1
    assert v.significance_level_of(_m(old)) == 0.1 and judge(_m(old)).outcome == "significant"


def test_the_verdict_line_names_its_figures_and_the_looks():
    verdict = judge(_m(_doc(0.9987, 5e-4, mean=0.0041, looks=3, looks_note="3 looks without a spread")))
    assert verdict.text == (
        "edge significant out of sample: PSR 0.999, excess over buy_and_hold +0.41%/day (p 5.0e-04), "
        "3 looks counted, level 0.05; 3 looks without a spread"
    )
    assert judge(_m(_doc(0.62, 0.71, mean=-0.0002))).text == (
        "edge not significant out of sample: PSR 0.620, excess over buy_and_hold -0.02%/day (p 0.710), "
        "1 look counted, level 0.05"
    )


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"sessions": 39}, "the held-out window has 39 sessions, the test needs at least 40"),
        ({"held_out": False}, "the test window is not held out"),
        ({"reason": "the champion's daily returns have no Sharpe ratio"}, "no Sharpe ratio"),
        ({"psr": None}, "the PSR is undefined"),
        ({"p": None}, "the test against buy_and_hold is undefined"),
    ],
)
def test_not_measurable_says_why(overrides, why):
    args = {"psr": 0.99, "p": 0.001, **overrides}
    verdict = judge(_m(_doc(args.pop("psr"), args.pop("p"), **args)))
    assert verdict.outcome == "not measurable" and verdict.significant is None
    assert verdict.headline == "edge not measurable" and why in verdict.text


def test_the_diagnostics_line_follows_and_does_not_change_the_verdict():
    doc = _doc(0.99, 0.001)
    doc["selection"] = {
        "num_trials": 102,
        "spa_p_value": 0.004,
        "spa_benchmark": "buy_and_hold",
        "valid_dsr": 0.97,
        "effective_trials": 9,
    }
    verdict = judge(_m(doc))
    assert verdict.diagnostics == (
        "selection on the validation window: SPA p 0.004 vs buy_and_hold, validation DSR 0.970 "
        "(9 effective of 102 trials), PBO 0.78 (ranking among pods)"
    )
    assert verdict.lines == (verdict.text, verdict.diagnostics)
    worse = {**doc, "pbo": 0.99, "selection": {**doc["selection"], "spa_p_value": 0.9, "valid_dsr": 0.01}}
    assert judge(_m(worse)).outcome == verdict.outcome == "significant"
    assert judge(_m(_doc(0.99, 0.001))).diagnostics.startswith("selection diagnostics n/a")
    none_above = {**doc, "selection": {**doc["selection"], "spa_p_value": 0.0, "spa_replications": 1000}}
    assert "SPA p < 0.001 vs buy_and_hold" in judge(_m(none_above)).diagnostics
    assert judge(_m(doc), "pod-9") is None  # the document tests another strategy


def test_the_stated_verdict_round_trips_through_metrics_json():
    verdict = EdgeVerdict("not significant", ("PSR 0.620",), ("a caveat",), "selection ...")
    doc = json.loads(json.dumps({**_doc(0.99, 0.001), **verdict_fields(verdict)}))
    assert doc["verdict"] == verdict.text and doc["verdict_outcome"] == "not significant"
    assert doc["verdict_diagnostics"] == "selection ..."
    # What the document states wins over what its figures would give today.
    assert stated_verdict(_m(doc)) == verdict
    assert stated_verdict(_m({**doc, **verdict_fields(None)})) is None
    # A document with the test but no stored verdict: judged once; one with neither states none.
    assert stated_verdict(_m(_doc(0.99, 0.001))) == judge(_m(_doc(0.99, 0.001)))
    assert stated_verdict(_m({"strategies": {"champion": {"sharpe_ratio": 1.0}}})) is None
    # A document from before the out-of-sample test: its stored verdict rests on other statistics and
    # is not shown as this one.
    old = {"verdict_outcome": "not significant", "verdict_figures": ["DSR 0.003"], "verdict_reasons": []}
    assert stated_verdict(_m({**old, "strategies": {"champion": {}}})) is None


def test_the_report_writes_the_verdict_of_the_rule():
    import torch

    from backtests import engine, report
    from data.toy import toy_market
    from envs.trading import EnvParams

    market = toy_market(num_steps=45 * 390, num_assets=3, num_features=2, seed=1)
    policy = lambda obs: torch.full((obs.shape[0], 3), 0.3)  # noqa: E731
    result = engine.run_backtest(market, EnvParams(decision_interval=390), {"champion": policy})
    doc = report.metrics_document(
        result, window="test", significance_level=0.1, seed=3, annualization=TRADING_DAYS_PER_YEAR
    )
    verdict = judge(doc, "champion")
    assert doc.verdict == verdict.text and stated_verdict(doc) == verdict
    assert doc.verdict_outcome == verdict.outcome in v.OUTCOMES and "level 0.1" in verdict.text
    assert doc.oos_test.seed == 3 and doc.oos_test.num_sessions == 45
    baselines_only = engine.run_backtest(
        market, EnvParams(decision_interval=390), baselines=("buy_and_hold",)
    )
    assert (
        stated_verdict(
            report.metrics_document(baselines_only, window="test", annualization=TRADING_DAYS_PER_YEAR)
        )
        is None
    )


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
    assert own == {"SIGNIFICANCE_LEVEL", "MIN_OOS_SESSIONS", "ANNUALIZED_MIN_SESSIONS", "ANNUALIZED_KEYS"}


def test_the_config_level_defaults_to_the_verdict_modules():
    from app.config import Config

    assert Config().backtest.significance_level == v.SIGNIFICANCE_LEVEL
    assert Config().gate.level is None  # the promotion rule's level: unset reads the backtest's


# --- (c) light -------------------------------------------------------------------------------------
def test_the_verdict_imports_without_torch_or_the_statistics_libraries():
    code = (
        "import sys; import backtests.verdict, app.dashboard.verdict_box; "
        "heavy = {'torch', 'arch', 'scipy', 'statsmodels'} & set(sys.modules); "
        "assert not heavy, f'{heavy} imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
