"""docs/benchmarks.md survives its own refresh: a benchmark's `--markdown docs/benchmarks.md`
replaces only the text between its `<!-- NAME:start -->` and `<!-- NAME:end -->` markers
(benchmarks/__init__.py: write_section), so every start has its end, no block sits inside
another, and nothing written by hand (a heading, the reading) is inside a block, where a
refresh would drop it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- ([A-Za-z0-9_.-]+):(start|end) -->$")  # a line of its own


def marker_problems(text: str) -> list[str]:
    """What a refresh would break in a page: unmatched or nested markers, a name used twice,
    a heading (hand-written, a `#` line outside code fences) inside a block."""
    problems: list[str] = []
    open_name: str | None = None
    opened_at = 0
    seen: set[str] = set()
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        found = MARKER.match(line)
        if found:
            name, side = found.groups()
            if side == "start":
                if open_name is not None:
                    problems.append(f"line {number}: {name} starts inside {open_name} "
                                    f"(opened at line {opened_at})")
                if name in seen:
                    problems.append(f"line {number}: a second {name} block")
                seen.add(name)
                open_name, opened_at = name, number
            elif open_name != name:
                problems.append(f"line {number}: {name}:end without its start"
                                + (f" (inside {open_name})" if open_name else ""))
            else:
                open_name = None
        elif open_name is not None and not fenced and re.match(r"#{1,6}\s", line):
            problems.append(f"line {number}: heading inside {open_name}: {line.strip()}")
    if open_name is not None:
        problems.append(f"line {opened_at}: {open_name}:start never ends")
    return problems


def test_the_check_finds_each_kind_of_damage() -> None:
    good = "## A\n\n<!-- a:start -->\n| x |\n<!-- a:end -->\n\nReading.\n"
    assert marker_problems(good) == []
    assert marker_problems("<!-- a:start -->\n## A\n<!-- a:end -->\n")
    assert marker_problems("<!-- a:start -->\n<!-- b:start -->\n<!-- b:end -->\n<!-- a:end -->\n")
    assert marker_problems("<!-- a:start -->\ntext\n")
    assert marker_problems("text\n<!-- a:end -->\n")
    assert marker_problems(good + good)
    assert marker_problems("<!-- a:start -->\n```bash\n# a comment\n```\n<!-- a:end -->\n") == []


def test_a_refresh_of_the_benchmarks_page_drops_no_hand_written_text() -> None:
    page = ROOT / "docs/benchmarks.md"
    problems = marker_problems(page.read_text())
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


def unheaded_blocks(text: str) -> list[str]:
    """The blocks whose start marker has no heading right above it (blank lines between)."""
    lines = text.splitlines()
    problems = []
    for number, line in enumerate(lines):
        found = MARKER.match(line)
        if found and found.group(2) == "start":
            above = [text for text in lines[:number] if text.strip()]
            if not (above and above[-1].startswith("#")):
                problems.append(f"line {number + 1}: {found.group(1)} has no heading right above")
    return problems


def test_every_block_is_under_its_own_heading() -> None:
    """Each figure has a heading of its own above its start marker, so a reader finds it in
    the page's contents and a refresh keeps it."""
    problems = unheaded_blocks((ROOT / "docs/benchmarks.md").read_text())
    assert not problems, "docs/benchmarks.md:\n" + "\n".join(problems)
