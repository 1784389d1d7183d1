"""How often PPO's learning test passes: the check of ``tests/test_agents_learning.py`` over many seeds.

    python benchmarks/learning_seeds.py [--seeds 0-15] [--json]

For each seed, exactly the test's check (``learns``): PPO trained on the regime market with its
informative feature and on the control, each deterministic policy backtested on the validation
sessions against buy-and-hold; it passes when the excess log return is above the margin with the
signal and below it on the control. Prints each seed's two figures, its verdict and its seconds (one
intra-op thread, as in the test), then the pass count. docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/ is not installed

import torch  # noqa: E402

from tests.test_agents_learning import MARGIN, learns  # noqa: E402


def _seeds(text: str) -> list[int]:
    try:
        if "-" in text:
            first, last = text.split("-")
            return list(range(int(first), int(last) + 1))
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a range 0-15 or a list 0,3,7: {text!r}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds", type=_seeds, default="0-15", help="a range 0-15 or a list 0,3,7 (default 0-15)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for seed in args.seeds:
        started = time.perf_counter()
        passed, with_signal, control = learns(seed)
        rows.append(
            {
                "seed": seed,
                "with_signal": with_signal,
                "control": control,
                "passed": passed,
                "seconds": time.perf_counter() - started,
            }
        )
        if not args.json:
            row = rows[-1]
            print(
                f"seed {seed:2d}: signal {with_signal:+.3f}  control {control:+.3f}  "
                f"{'pass' if passed else 'FAIL'}  {row['seconds']:.0f} s",
                flush=True,
            )
    passes = sum(r["passed"] for r in rows)
    if args.json:
        print(json.dumps({"margin": MARGIN, "passed": passes, "seeds": len(rows), "rows": rows}, indent=2))
    else:
        print(f"passed {passes} of {len(rows)} seeds (margin {MARGIN:+.2f})")


if __name__ == "__main__":
    main()
