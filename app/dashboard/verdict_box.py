"""The Overview's verdict box: the verdict metrics.json states, in the colour of its outcome.

The verdict itself is ``backtests.verdict``'s, as the backtest wrote it (for a run from before the
verdict was stored, judged once by the same module); nothing here re-derives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from backtests.metrics_model import MetricsDocument
from backtests.verdict import Outcome, stated_verdict

BoxKind = Literal["success", "warning", "info"]
#: The Streamlit box of each outcome: green when significant, orange when not, blue when not measurable.
BOX_KINDS: dict[Outcome, BoxKind] = {
    "significant": "success",
    "not significant": "warning",
    "not measurable": "info",
}


@dataclass(frozen=True)
class VerdictBox:
    """What the page renders: ``st.<kind>(text)``, then the selection diagnostics as a caption."""

    kind: BoxKind
    text: str
    diagnostics: str = ""


def verdict_box(metrics: MetricsDocument) -> VerdictBox | None:
    """The box for the verdict ``metrics`` states; None when it states none."""
    verdict = stated_verdict(metrics)
    if verdict is None:
        return None
    return VerdictBox(BOX_KINDS[verdict.outcome], verdict.text, verdict.diagnostics)
