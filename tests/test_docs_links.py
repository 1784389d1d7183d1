"""Every relative link of README.md and docs/*.md resolves: the file exists and, for ``#anchor``
links into a Markdown file, a heading of that file has that anchor (GitHub's rule: the heading's
text, lower-cased, punctuation dropped, spaces as hyphens, ``-1``, ``-2`` ... for repeats).
Links in code blocks and code spans are not links; ``http(s)://`` and ``mailto:`` targets are not
checked (no network).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXTERNAL = ("http://", "https://", "mailto:")


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's Markdown text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters, digits and "_" (Unicode too)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(path):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link and image outside code."""
    found = []
    for number, line in _prose_lines(path):
        for match in _LINK.finditer(_CODE_SPAN.sub("", line)):
            found.append((number, match.group(1)))
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for number, target in links(path):
        if target.startswith(_EXTERNAL):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not resolved.exists():
            problems.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading with this anchor in {resolved.name}")
    return problems


def test_the_docs_are_found() -> None:
    names = {p.name for p in DOCS}
    assert {"README.md", "benchmarks.md", "env.md"} <= names


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


def test_slug_follows_github() -> None:
    assert slug('Ensemble vs best (measured): why the default stays `"best"`') == (
        "ensemble-vs-best-measured-why-the-default-stays-best"
    )
    assert slug("`TradingVecEnv(market, num_envs=1)`") == "tradingvecenvmarket-num_envs1"
    assert slug("The demo: data → tournament → backtest") == "the-demo-data--tournament--backtest"


def test_a_broken_link_and_a_broken_anchor_are_reported(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n\n## Part one\n\n[ok](#part-one) [ok](doc.md#title) [bad](#part-two) [gone](nope.md)\n"
        "```\n[in code](nowhere.md)\n```\nand `[span](nowhere.md)`\n",
        encoding="utf-8",
    )
    assert broken_links(doc, root=tmp_path) == [
        "doc.md:5: #part-two: no heading with this anchor in doc.md",
        "doc.md:5: nope.md: no such file",
    ]
