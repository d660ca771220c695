"""hpo's reaches into Ray's private parts live in one adapter per floor, each with the Ray
version it was read from: a Ray upgrade fails here, loudly, naming what is gone or changed."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hpo"
ADAPTERS = ("hpo.trial.ray_private", "hpo.cluster.ray_private", "hpo.driver.ray_private",
            "hpo.driver.plugins.ray_internals")
# What only an adapter may name. A traceback's file path (storage_faults reads
# 'ray/train/_internal/storage.py' in tracebacks' text) is text, not a reach: not matched.
PRIVATE = ("ray._raylet", "ray._private", "ray.train._internal", "_handle_ray_actor_error")
PRIVATE_MODULES = {"ray": {"_raylet", "_private"}, "ray.train": {"_internal"}}


def _adapter(name: str) -> ModuleType:
    return importlib.import_module(name)


@pytest.mark.parametrize("name", ADAPTERS)
def test_ray_still_has_what_each_adapter_reads(name: str) -> None:
    """Every reach of the adapter is there, callable, with the parameters hpo passes, in the
    Ray it was read from: a newer Ray must be checked against it (and RAY_VERSION moved)."""
    import ray

    adapter = _adapter(name)
    assert adapter.missing() == []
    assert ray.__version__ == adapter.RAY_VERSION, f"re-read {adapter.__file__}"


def _mentions(path: Path) -> list[str]:
    text = path.read_text()
    found = [word for word in PRIVATE if word in text]
    for node in ast.walk(ast.parse(text)):  # `from ray import _private` names none of PRIVATE
        if isinstance(node, ast.ImportFrom) and node.module in PRIVATE_MODULES:
            found += [f"from {node.module} import {a.name}" for a in node.names
                      if a.name in PRIVATE_MODULES[node.module]]
    return found


def test_only_the_adapters_reach_into_ray_privates() -> None:
    adapters = {PACKAGE.parent / (name.replace(".", "/") + ".py") for name in ADAPTERS}
    assert all(path.exists() for path in adapters)
    reaches = {str(path.relative_to(PACKAGE.parent)): found
               for path in sorted(PACKAGE.rglob("*.py")) if path not in adapters
               if (found := _mentions(path))}
    assert reaches == {}


def test_the_check_catches_a_reach(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("from ray import _raylet\nfrom ray.train._internal import session\n")
    assert _mentions(sneaky) == ["ray.train._internal", "from ray import _raylet"]
    sneaky.write_text("TRACEBACK = r'ray/train/_internal/storage\\.py'\n")
    assert _mentions(sneaky) == []


def test_a_missing_reach_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray._raylet
    import ray.train._internal.session
    from ray.tune.experiment.trial import Trial

    monkeypatch.delattr(ray.train._internal.session, "get_session")
    monkeypatch.delattr(ray._raylet, "AuthenticationTokenLoader")
    monkeypatch.setattr(Trial, "_handle_ray_actor_error", lambda self, error, why: None)
    assert _adapter("hpo.trial.ray_private").missing() == [
        "ray.train._internal.session.get_session()"]
    assert _adapter("hpo.cluster.ray_private").missing() == [
        "ray._raylet.AuthenticationTokenLoader"]
    assert _adapter("hpo.driver.ray_private").missing() == [
        "Trial._handle_ray_actor_error(self, exc)"]


def test_outside_a_trial_there_is_no_session() -> None:
    from hpo.trial import cost, ray_private, session

    assert ray_private.train_session() is None
    assert ray_private.trial_storage() is None and ray_private.last_report_time() is None
    assert session.trial_folder() is None and cost.current() is None


def test_without_monitors_applies_to_the_block_only() -> None:
    from ray._private.parameter import RayParams

    from hpo.driver.ray_private import without_monitors

    with without_monitors():
        during = RayParams(num_cpus=1)
    after = RayParams()
    assert (during.no_monitor, during.include_log_monitor, during.num_cpus) == (True, False, 1)
    assert (after.no_monitor, after.include_log_monitor) == (False, None)


class _Trial:
    trial_id = "t1"


def test_node_losses_are_forgiven_then_counted_and_the_hook_restored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.exceptions import RayActorError
    from ray.tune.experiment.trial import Trial

    from hpo.driver.guards.node_loss import FORGIVEN, NODE_DIED, node_losses_forgiven

    counted: list[tuple[Any, BaseException]] = []

    def tunes_own(trial: Any, exc: BaseException) -> None:
        counted.append((trial, exc))

    monkeypatch.setattr(Trial, "_handle_ray_actor_error", tunes_own)
    trial, lost = _Trial(), RayActorError(error_msg=f"The actor died because {NODE_DIED}.")
    oom = RayActorError(error_msg="The actor died: OOM")
    with node_losses_forgiven():
        assert Trial._handle_ray_actor_error is not tunes_own
        for _ in range(FORGIVEN):
            Trial._handle_ray_actor_error(trial, lost)
        assert counted == []
        Trial._handle_ray_actor_error(trial, lost)  # one too many
        Trial._handle_ray_actor_error(trial, oom)
    assert counted == [(trial, lost), (trial, oom)]
    assert Trial._handle_ray_actor_error is tunes_own
