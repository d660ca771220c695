"""The benchmark harness (`python -m benchmarks`): one entry point, a registry whose entries
all resolve, no path tricks or test imports in benchmarks/, at most 12 modules, an owner for
every section of docs/benchmarks.md, and a refresh of a section that leaves the rest of the
page as it was. Fast: no Ray is started."""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from calls import ROOT
from test_benchmarks_doc import marker_problems, unheaded_blocks

import benchmarks
from benchmarks import REGISTRY, owner, publish
from benchmarks.__main__ import parser_for

BENCHMARKS = ROOT / "benchmarks"
MODULES = sorted(BENCHMARKS.rglob("*.py"))


def test_list_names_every_benchmark() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--list"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    assert listed == list(REGISTRY)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_entry_resolves_and_parses(name: str) -> None:
    bench = REGISTRY[name]
    assert callable(bench.resolve("run")) and callable(bench.resolve("flags"))
    args = parser_for(bench).parse_args([])
    assert args.markdown is None and args.json is None


def test_benchmarks_neither_touch_sys_path_nor_import_tests() -> None:
    for path in MODULES:
        text = path.read_text()
        assert "sys.path" not in text, path
        for node in ast.walk(ast.parse(text)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "tests" or n.startswith("tests.") for n in names), path


def test_at_most_twelve_modules() -> None:
    assert len(MODULES) <= 12, [p.name for p in MODULES]


def test_every_section_of_the_benchmarks_page_has_an_owner() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    sections = re.findall(r"(?m)^<!-- ([\w.-]+):start -->$", page)
    assert sections
    assert [s for s in sections if owner(s) is None] == []


def test_shared_flags_are_offered_only_where_they_mean_something() -> None:
    overhead = parser_for(REGISTRY["overhead"]).parse_args(["--quick", "--rounds", "2"])
    assert overhead.quick and overhead.rounds == 2
    with pytest.raises(SystemExit):
        parser_for(REGISTRY["gpu"]).parse_args(["--rounds", "2"])
    with pytest.raises(SystemExit):
        parser_for(REGISTRY["rank-reuse"]).parse_args(["--markdown", "x.md"])


def _split(text: str, key: str) -> tuple[str, str, str]:
    """(up to and with the start marker line, the block, from the end marker line on)."""
    found = re.search(rf"(?ms)^<!-- {key}:start -->\n(.*?)^<!-- {key}:end -->$", text)
    assert found, key
    return text[:found.start(1)], found.group(1), text[found.end(1):]


def _refresh(page: Path, monkeypatch: pytest.MonkeyPatch, key: str, title: str,
             body: str) -> None:
    """What `python -m benchmarks NAME --markdown PAGE` does at its end, with dummy figures."""
    monkeypatch.setattr(benchmarks, "machine", lambda: "a test machine")
    monkeypatch.setattr(benchmarks, "versions", lambda: "Python 3")
    args = argparse.Namespace(markdown=page, started=time.monotonic(),
                              command=f"python -m benchmarks {key} --markdown {page}")
    publish(args, key, title, body)


def test_a_refresh_rewrites_its_block_and_nothing_else(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    before = (ROOT / "docs" / "benchmarks.md").read_text()
    page = tmp_path / "benchmarks.md"
    page.write_text(before)
    figures = "| measure | new/old |\n|---|---|\n| results/s | **9.99** |"
    _refresh(page, monkeypatch, "throughput", "Result throughput", figures)
    after = page.read_text()

    head_before, block_before, tail_before = _split(before, "throughput")
    head_after, block_after, tail_after = _split(after, "throughput")
    assert (head_after, tail_after) == (head_before, tail_before)  # byte for byte
    assert block_after != block_before
    assert block_after.startswith("Command: `python -m benchmarks throughput")
    assert block_after.endswith(figures + "\n")
    assert not [line for line in block_after.splitlines() if line.startswith("#")]
    assert marker_problems(after) == [] and unheaded_blocks(after) == []


def test_a_new_section_gets_its_heading_above_the_block(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\nQuoted, not a block: `<!-- fresh:start -->`.\n")
    for figures in ("first", "second"):
        _refresh(page, monkeypatch, "fresh", "A fresh section", figures)
    text = page.read_text()
    assert text.count("## A fresh section") == 1
    assert text.count("<!-- fresh:start -->\n") == 1 and "second\n<!-- fresh:end -->" in text
    assert text.startswith("# Page\n\nQuoted, not a block: `<!-- fresh:start -->`.\n")
    assert marker_problems(text) == [] and unheaded_blocks(text) == []
