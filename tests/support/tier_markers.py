"""The tiers' markers, applied from what a test does, and checked while it runs.

A test that asks for the test Slurm cluster (the `slurm` fixture) is marked `slurm`, `slow`
and `ray`: its jobs start Ray on the cluster's nodes. A test is marked `ray` when its own
code, its fixtures or the helpers of its module that it calls start a Ray: `hpo.run`,
`hpo.resume`, an embedded or connected Ray, `ray.init`, or the CLI's `run`/`resume`/`local
up`. A test that starts one unmarked anyway (in this process, or the CLI's run in a
subprocess) fails and says to mark it: the unit tier (`-m "not ray and not slow"`) then never
starts a Ray.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

STARTS_RAY = re.compile(
    r"\bhpo\.(run|resume)\(|\b(embedded_ray|connected_ray|run_in_allocation)\(|\bray\.init\("
    r"|\b(hpo_cli|cli_invoke|_cli|run_cli)\(\s*\[?\s*\"(run|resume|local)\""
    r"|\bTuner\(|\btune\.run\("
    r"|[\"']hpo[\"'],\s*[\"'](run|resume|local)[\"']"  # [python, "-m", "hpo", "run", ...]
    r"|[\"'][^\"'\n]*\bhpo (run|resume|local up)\b")  # a shell line that runs it
_current: list[pytest.Item] = []
TESTS = str(Path(__file__).resolve().parents[1])


def _source(obj: Any) -> str:
    """The code of a function, its docstring left out (it may name `hpo run` in prose)."""
    try:
        text = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return ""
    return text.replace(obj.__doc__, "") if inspect.isfunction(obj) and obj.__doc__ else text


def _called_helpers(source: str, module: ModuleType) -> list[Any]:
    """The functions of the tests' own modules that this source (of `module`) calls by name."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = {node.func.id for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    return [obj for name in names if inspect.isfunction(obj := getattr(module, name, None))
            and str(inspect.getsourcefile(obj) or "").startswith(TESTS)]


@functools.cache
def _looked_at(obj: Any) -> tuple[bool, tuple[Any, ...]]:
    """Whether this function's own code starts a Ray, and the test helpers it calls (read once
    per function: parametrized tests and shared fixtures would read it again and again)."""
    source = _source(obj)
    if STARTS_RAY.search(source):
        return True, ()
    module = inspect.getmodule(obj)
    if module is None or module.__name__ == __name__:
        return False, ()
    return False, tuple(_called_helpers(source, module))


def starts_ray(item: pytest.Function) -> bool:
    """Whether the test's code, its fixtures' or its module's helpers it calls start a Ray."""
    fixtures = [d.func for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs]
    todo, seen = [item.function, *fixtures], set()
    while todo:
        obj = todo.pop()
        if obj in seen:
            continue
        seen.add(obj)
        starts, helpers = _looked_at(obj)
        if starts:
            return True
        todo += helpers
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        if "slurm" in item.fixturenames:  # the test Slurm cluster's fixture (slurm_jobs.py)
            for name in ("slurm", "slow", "ray"):
                if item.get_closest_marker(name) is None:
                    item.add_marker(name)
        if item.get_closest_marker("ray") is None and starts_ray(item):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(autouse=True)
def _ray_marker_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that starts a Ray in this process without the `ray` marker."""
    import sys

    marked = request.node.get_closest_marker("ray") is not None
    ray = sys.modules.get("ray")
    before = ray is not None and ray.is_initialized()
    _current.append(request.node)
    try:
        yield
    finally:
        _current.pop()
    ray = sys.modules.get("ray")
    if not marked and not before and ray is not None and ray.is_initialized():
        pytest.fail("this test starts a Ray but is not marked `ray` "
                    "(tests/support/tier_markers.py: "
                    "call hpo.run or the like where STARTS_RAY sees it, or mark it)")


def check_cli_marked(args: tuple[str, ...]) -> None:
    """The CLI's commands that start a Ray, run from an unmarked test: fail it."""
    starts = args[:1] in (("run",), ("resume",)) or args[:2] == ("local", "up")
    if starts and _current and _current[-1].get_closest_marker("ray") is None:
        pytest.fail(f"`hpo {' '.join(args[:2])}` starts a Ray: mark the test `ray`")
