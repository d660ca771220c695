"""The house's shape: imports run one way, floor by floor, and never in a circle.

Floors, top to bottom (a module may import its own floor's other rooms, or any floor below):
    cli, hpo/__init__, __main__
    driver, reporting
    cluster, trial (what runs inside a trial: session, cost, dist, large_batch, ranks/),
    optuna, results
    spec, install (the installers: they import nothing else of hpo)
    errors
Every `import hpo...` counts, also those inside functions (lazy imports are still edges).
A module another starts as a process by its name (`python -m hpo.x`) is no import, but it is
checked too: the name must run, and a launch up a floor is one of those known here.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hpo"
FLOORS = {
    "cli": 4, "__init__": 4, "__main__": 4,
    "driver": 3, "reporting": 3,
    "cluster": 2, "trial": 2, "optuna": 2, "results": 2, "ray_adapters": 2,
    "spec": 1, "install": 1,
    "errors": 0,
}
# Processes a module starts by another's name, up a floor: the batch scripts' and join jobs'
# `hpo` commands, and a node's `ray start` with forked workers (a Slurm node's, a warm Ray's).
LAUNCHED_UP = {("hpo.cluster.sbatch", "hpo"), ("hpo.cluster.join", "hpo"),
               ("hpo.cluster.node", "hpo.driver.backends.node_start"),
               ("hpo.cluster.warm", "hpo.driver.backends.warm_head")}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """hpo modules imported by this file; `from hpo.x import y` counts hpo.x.y if y is one."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "hpo")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module.split(".")[0] == "hpo"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return found & set(modules)


def _launches(path: Path) -> set[str]:
    """The hpo modules this file starts by name: a string after "-m" in a list or tuple."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.List, ast.Tuple)):
            texts = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found.update(name for flag, name in itertools.pairwise(texts)
                         if flag == "-m" and isinstance(name, str)
                         and name.split(".")[0] == "hpo")
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def test_every_room_has_a_floor() -> None:
    rooms = {_room(module) for module in _modules()}
    assert rooms - set(FLOORS) == set(), "a new top-level module or folder needs a floor"


def test_the_root_holds_few_loose_modules() -> None:
    loose = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__", "__main__", "errors"]


def test_the_trial_side_imports_nothing_of_the_driver_or_the_cluster() -> None:
    reached = {b for a, targets in _graph().items() if _room(a) == "trial" for b in targets}
    assert {_room(b) for b in reached} <= {"trial", "spec", "errors", "ray_adapters"}
    # what a trial process reads of Ray's private parts, and nothing else of the adapters
    assert {b for b in reached if _room(b) == "ray_adapters"} <= {
        "hpo.ray_adapters", "hpo.ray_adapters.train_session", "hpo.ray_adapters.gate",
        "hpo.ray_adapters.registry"}


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} -> {b}" for a, targets in graph.items() for b in targets
            if FLOORS[_room(b)] > FLOORS[_room(a)]]


def test_what_is_launched_by_name_runs_and_goes_up_only_where_known() -> None:
    modules = _modules()
    launched = {(name, target) for name, path in modules.items() for target in _launches(path)}
    assert ("hpo.cluster.node", "hpo.driver.backends.node_start") in launched  # the reading works
    runnable = {name for name, path in modules.items() if f"{name}.__main__" in modules
                or 'if __name__ == "__main__":' in path.read_text()}
    assert {target for _, target in launched} - runnable == set()
    up = {(a, b) for a, b in launched if FLOORS[_room(b)] > FLOORS[_room(a)]}
    assert up == LAUNCHED_UP


def test_no_import_goes_up_a_floor() -> None:
    assert _upward(_graph()) == []


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    stack, on_path = [(start, iter(sorted(graph[start])))], [start]
    while stack:
        node, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            on_path.pop()
        elif child == start:
            return [*on_path, start]
        elif child not in on_path:
            stack.append((child, iter(sorted(graph[child]))))
            on_path.append(child)
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    return [cycle for module in graph if (cycle := _cycle_from(module, graph))]


def test_no_import_cycle() -> None:
    cycles = _cycles(_graph())
    assert cycles == [], " | ".join(" -> ".join(c) for c in cycles[:3])


@pytest.mark.parametrize("edge", [("hpo.spec.model", "hpo.driver.run.runner"),
                                  ("hpo.cluster.bootstrap", "hpo.cli")])
def test_the_checks_catch_an_upward_import(edge: tuple[str, str]) -> None:
    """What the layout had before (the cluster side importing the driver, spec importing up)
    is caught: the checks read real edges, and fail when one goes the wrong way."""
    graph = _graph()
    source, target = edge
    graph[source].add(target)
    assert _upward(graph) == [f"{source} -> {target}"]
    assert _cycles(graph) != []  # the target already reaches the source


def test_the_driver_and_the_adapters_stay_small_rooms() -> None:
    """No folder of the driver or of the adapters holds more than 12 modules flat, and no
    module there is over 300 lines: a newcomer sees each room whole."""
    rooms = [PACKAGE / "driver", PACKAGE / "ray_adapters"]
    folders = [f for room in rooms for f in [room, *room.rglob("*")]
               if f.is_dir() and f.name != "__pycache__"]
    crowded = {str(f.relative_to(PACKAGE)): n for f in folders
               if (n := len(list(f.glob("*.py")))) > 12}
    long = {str(p.relative_to(PACKAGE)): n for room in rooms for p in room.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 300}
    assert crowded == {} and long == {}
