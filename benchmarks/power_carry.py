"""Carrying a power table's rows to an arm whose change cannot reach them, and checking the rest.

An arm that changes only how the tournament's refit judges a fine-tuned champion against its start
(``[agent] refit_alpha``, ``agents.tournament.refit``) leaves every market whose champion is its own
start as it was: there the refit never compares the two (the row's ``champion_start_t`` is null),
and everything before the refit (the data, the tournament, the baselines) is seeded and the same
code. So the arm's table is the earlier table's rows on those markets, carried over, and fresh rows
on the markets where the champion was fine-tuned:

- ``carry``: the rows of ``--source`` with settings ``--from-key`` and no ``champion_start_t``,
  written to ``--out`` with the arm's key ``--to-key`` and ``carried_from`` (the source's key and
  commit); ``power_table.py`` with the arm's settings and ``--out`` then skips them and runs the other
  markets in full;
- ``check``: each fresh row of ``--out`` against the source's row of the same market: the same
  tournament (its ``champion_start_t``, env-steps and pods tried) and every column but the champion
  unchanged (``power_rerun.CHECKED_FIELDS``), and every market of the source in ``--out``, carried or
  run; one line per difference and exit status 1 if any, for
  then the premise (the same tournament, before the refit) does not hold and the carried rows may not
  stand for the arm's.

    .venv/bin/python benchmarks/power_carry.py carry --source A.jsonl --out B.jsonl --from-key K --to-key K2
    .venv/bin/python benchmarks/power_carry.py check --source A.jsonl --out B.jsonl --from-key K --to-key K2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.power_rerun import spot_mismatches  # noqa: E402
from benchmarks.power_table import read_rows  # noqa: E402
from data.planted import MINUTE_MOMENTUM  # noqa: E402

#: What must match between the source's row and a fresh row for the tournament to be the same.
TOURNAMENT_FIELDS = ("champion_start_t", "env_steps", "pods_tried", "champion_kind", "seed")


def _rows(path: Path, key: str) -> dict[tuple[str, float, int], dict]:
    """The rows of ``path`` with settings ``key``, by market (shape, level, index)."""
    return {
        (str(row.get("shape", MINUTE_MOMENTUM)), float(row["level"]), int(row["index"])): row
        for row in read_rows(path)
        if row.get("settings_key") == key
    }


def carry(source: Path, out: Path, from_key: str, to_key: str) -> int:
    """Write the carried rows to ``out``, a fresh file (written whole, atomically); returns how many."""
    if out.exists() and out.stat().st_size > 0:
        sys.exit(f"error: {out} already holds rows: carry into a fresh file")
    carried = [
        {
            **row,
            "settings_key": to_key,
            "carried_from": {"settings_key": from_key, "commit": row.get("commit")},
        }
        for row in _rows(source, from_key).values()
        if row.get("champion_start_t") is None
    ]
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in carried))
    tmp.replace(out)
    return len(carried)


def check(source: Path, out: Path, from_key: str, to_key: str) -> list[str]:
    """What differs between each fresh row of ``out`` and the source's row of its market, and which
    of the source's markets the arm lacks."""
    old = _rows(source, from_key)
    arm = _rows(out, to_key)
    problems = [
        f"{market}: no row of the arm (neither carried nor run)" for market in sorted(old.keys() - arm.keys())
    ]
    for market, new in sorted(arm.items()):
        if "carried_from" in new:
            continue
        before = old.get(market)
        if before is None:
            problems.append(f"{market}: no row of the source")
            continue
        keep = tuple(c for c in new.get("columns", ()) if c != "champion")
        moved = [f for f in TOURNAMENT_FIELDS if before.get(f) != new.get(f)] + spot_mismatches(
            before, new, keep
        )
        if moved:
            problems.append(f"{market}: {', '.join(moved)} differ")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("carry", "check"))
    p.add_argument("--source", type=Path, required=True, help="the earlier table's rows (JSON lines)")
    p.add_argument("--out", type=Path, required=True, help="the arm's rows (JSON lines)")
    p.add_argument("--from-key", required=True, help="the earlier table's settings key")
    p.add_argument("--to-key", required=True, help="the arm's settings key")
    args = p.parse_args(argv)
    if not args.source.is_file():
        sys.exit(f"error: {args.source}: no such file")
    if args.action == "carry":
        print(f"carried {carry(args.source, args.out, args.from_key, args.to_key)} rows to {args.out}")
        return 0
    if not args.out.is_file():
        sys.exit(f"error: {args.out}: no such file")
    problems = check(args.source, args.out, args.from_key, args.to_key)
    for line in problems:
        print(line)
    fresh = sum("carried_from" not in r for r in _rows(args.out, args.to_key).values())
    print(f"{fresh} fresh rows checked: {'the same tournaments' if not problems else 'differences above'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
