"""The benchmark harness (`python -m benchmarks`): one entry point, a registry whose entries
all resolve, no path tricks or test imports in benchmarks/, at most 12 modules, and an owner
for every section of docs/benchmarks.md. Fast: no Ray is started."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from benchmarks import REGISTRY, owner
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
