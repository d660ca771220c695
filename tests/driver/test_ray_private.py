"""hpo's reaches into Ray's private parts live in one adapter per floor, each with the Ray
version it was read from: a Ray upgrade fails here, loudly, naming what is gone or changed."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hpo"
# Every module of the adapters package that reads Ray's private parts, each with its check.
ADAPTERS = tuple(sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    for path in (PACKAGE / "ray_adapters").rglob("*.py")
    if "\ndef missing() -> list[str]:" in path.read_text()))
# What only an adapter may name. A traceback's file path (storage_faults reads
# 'ray/train/_internal/storage.py' in tracebacks' text) is text, not a reach: not matched.
PRIVATE = ("ray._raylet", "ray._private", "ray.train._internal", "_handle_ray_actor_error",
           "_set_search_properties_backwards_compatible", "mlflow_util._")
PRIVATE_MODULES = {"ray": {"_raylet", "_private"}, "ray.train": {"_internal"}}


def _adapter(name: str) -> ModuleType:
    return importlib.import_module(name)


@pytest.mark.parametrize("name", ADAPTERS)
def test_ray_still_has_what_each_adapter_reads(name: str) -> None:
    """Every reach of the adapter is there, callable, with the parameters hpo passes, in every
    Ray of the tested range: a newer Ray must be checked against it (and the range moved)."""
    from hpo.ray_adapters import gate
    from hpo.ray_adapters.registry import NEWEST_RAY, OLDEST_RAY

    adapter = _adapter(name)
    assert adapter.missing() == []
    assert OLDEST_RAY <= gate.ray_version() <= NEWEST_RAY, f"re-read {adapter.__file__}"


def _mentions(path: Path) -> list[str]:
    text = path.read_text()
    found = [word for word in PRIVATE if word in text]
    for node in ast.walk(ast.parse(text)):  # `from ray import _private` names none of PRIVATE
        if isinstance(node, ast.ImportFrom) and node.module in PRIVATE_MODULES:
            found += [f"from {node.module} import {a.name}" for a in node.names
                      if a.name in PRIVATE_MODULES[node.module]]
    return found


def _ray_names(tree: ast.AST) -> set[str]:
    """The names a module binds to Ray's modules and objects (`import ray.x`, `from ray...`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names
                      if a.name.split(".")[0] == "ray"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray":
            names |= {a.asname or a.name for a in node.names}
    return names


def _base(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _patches(path: Path) -> list[str]:
    """Each change this module makes to Ray's objects: an attribute of Ray's assigned,
    setattr/replaced on one of Ray's, or Ray's source read (`inspect.getsource`)."""
    tree = ast.parse(path.read_text())
    ray_names = _ray_names(tree)
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        found += [f"line {node.lineno}: assigns {ast.unparse(target)}" for target in targets
                  if isinstance(target, ast.Attribute) and _base(target) in ray_names]
        if isinstance(node, ast.Call) and node.args and _base(node.args[0]) in ray_names \
                and ast.unparse(node.func) in ("setattr", "replaced", "inspect.getsource"):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}"
                         f"({ast.unparse(node.args[0])}, ...)")
    return sorted(found, key=lambda said: int(said.split()[1].rstrip(":")))


def test_only_the_adapters_reach_into_ray_privates() -> None:
    adapters = set((PACKAGE / "ray_adapters").rglob("*.py"))
    assert len(ADAPTERS) >= 13
    reaches = {str(path.relative_to(PACKAGE.parent)): found
               for path in sorted(PACKAGE.rglob("*.py")) if path not in adapters
               if (found := _mentions(path) + _patches(path))}
    assert reaches == {}


def test_the_check_catches_a_patch(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("import inspect\nimport ray.actor\nfrom ray.tune import Trainable as T\n"
                      "ray.actor.ActorClassID = int\nsetattr(T, 'train', None)\n"
                      "with replaced(T, 'step', wrap):\n    pass\n"
                      "text = inspect.getsource(T.train)\nmine = object()\nmine.x = 1\n")
    assert _patches(sneaky) == [
        "line 4: assigns ray.actor.ActorClassID", "line 5: setattr(T, ...)",
        "line 6: replaced(T, ...)", "line 8: inspect.getsource(T.train, ...)"]


def test_the_check_catches_a_reach(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("from ray import _raylet\nfrom ray.train._internal import session\n")
    assert _mentions(sneaky) == ["ray.train._internal", "from ray import _raylet"]
    sneaky.write_text("TRACEBACK = r'ray/train/_internal/storage\\.py'\n")
    assert _mentions(sneaky) == []
    sneaky.write_text("from ray.tune.search.util import _set_search_properties_backwards_compatible"
                      "\nclient = self.mlflow_util._get_client()\n")
    assert _mentions(sneaky) == ["_set_search_properties_backwards_compatible", "mlflow_util._"]


def test_a_missing_reach_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray._raylet
    import ray.train._internal.session
    import ray.tune.search.util
    from ray.tune.experiment.trial import Trial
    from ray.tune.logger.logger import LoggerCallback
    from ray.tune.search.optuna import OptunaSearch

    monkeypatch.delattr(ray.train._internal.session, "get_session")
    monkeypatch.delattr(ray._raylet, "AuthenticationTokenLoader")
    monkeypatch.setattr(Trial, "_handle_ray_actor_error", lambda self, error, why: None)
    monkeypatch.delattr(LoggerCallback, "_restore_from_remote")
    monkeypatch.setattr(OptunaSearch, "_setup_study", lambda self, mode, space: None)
    monkeypatch.delattr(ray.tune.search.util, "_set_search_properties_backwards_compatible")
    assert _adapter("hpo.ray_adapters.train_session").missing() == [
        "ray.train._internal.session.get_session()"]
    assert _adapter("hpo.ray_adapters.gcs").missing() == [
        "ray._raylet.AuthenticationTokenLoader"]
    assert _adapter("hpo.ray_adapters.tune_guards").missing() == [
        "Trial._handle_ray_actor_error(self, exc)",
        "ray.tune.logger.logger.LoggerCallback._restore_from_remote(self, file_name, trial)",
        "ray.tune.search.optuna.optuna_search.OptunaSearch._setup_study(self, mode)"]
    assert _adapter("hpo.ray_adapters.tune_rasda").missing() == [
        "ray.tune.search.util._set_search_properties_backwards_compatible"]


def _from_ray(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "ray"


def _private_overrides(cls: type) -> list[tuple[type, str]]:
    """(hpo class or mixin, name) of each underscore method that cls gets from hpo's code and
    that a Ray base of cls also defines: an override of one of Ray's private methods."""
    rays = [base for base in cls.__mro__ if _from_ray(base)]
    return [(own, name) for own in cls.__mro__ if own.__module__.split(".")[0] != "ray"
            for name, value in vars(own).items()
            if name.startswith("_") and not name.startswith("__")
            and isinstance(value, (FunctionType, staticmethod, classmethod))
            and any(name in vars(ray_base) for ray_base in rays)]


def _ray_subclasses() -> list[type]:
    """hpo's classes with a base from Ray, in every hpo module that imports Ray at its top."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        if not any(isinstance(n, ast.ClassDef) for n in tree.body) or not any(
                isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "ray"
                or isinstance(n, ast.Import) and any(a.name.split(".")[0] == "ray"
                                                      for a in n.names) for n in tree.body):
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = importlib.import_module(".".join(p for p in parts if p != "__init__"))
        found += [cls for cls in vars(module).values() if inspect.isclass(cls)
                  and cls.__module__ == module.__name__ and any(map(_from_ray, cls.__mro__))]
    return found


def _unlisted(overrides: list[tuple[type, str]], cls: type) -> list[str]:
    from hpo.ray_adapters.tune_guards import OVERRIDDEN_HOOKS, hook_class

    unlisted = []
    for own, name in overrides:
        hooks = [h for h in OVERRIDDEN_HOOKS if h.name == name and issubclass(cls, hook_class(h))]
        params = tuple(inspect.signature(vars(own)[name]).parameters)
        if not any(h.params == params for h in hooks):
            unlisted.append(f"{own.__qualname__}.{name}{params}")
    return unlisted


def test_every_override_of_a_ray_private_method_is_listed() -> None:
    """An override cannot move into an adapter: hpo.ray_adapters.tune_guards lists each one (with
    the parameters of Ray's and of hpo's method) and checks Ray still has it."""
    from hpo.ray_adapters.tune_guards import OVERRIDDEN_HOOKS

    classes = _ray_subclasses()
    assert {"JsonLogger", "CsvLogger", "WarmOptunaSearch"} <= {c.__name__ for c in classes}
    assert [u for cls in classes for u in _unlisted(_private_overrides(cls), cls)] == []
    used = {name for cls in classes for _, name in _private_overrides(cls)}
    assert used == {hook.name for hook in OVERRIDDEN_HOOKS}  # none listed that is not used


def test_the_override_check_catches_an_unlisted_one() -> None:
    from ray.tune.search.optuna import OptunaSearch

    class Sneaky(OptunaSearch):
        def _suggest_from_define_by_run_func(self, func: Any, ot_trial: Any) -> dict:
            return {}

        def _setup_study(self, mode: Any, extra: Any = None) -> None:  # not Ray's parameters
            pass

        def _mine(self) -> None:  # hpo's own: Ray has none of this name
            pass

    overrides = _private_overrides(Sneaky)
    assert [name for _, name in overrides] == ["_suggest_from_define_by_run_func",
                                               "_setup_study"]
    assert _unlisted(overrides, Sneaky) == [
        "test_the_override_check_catches_an_unlisted_one.<locals>.Sneaky."
        "_suggest_from_define_by_run_func('self', 'func', 'ot_trial')",
        "test_the_override_check_catches_an_unlisted_one.<locals>.Sneaky."
        "_setup_study('self', 'mode', 'extra')"]


def _inherited_private_state(cls: type) -> set[str]:
    """Each `self._name` in hpo's code of cls that Ray's bases define or assign."""
    from hpo.ray_adapters.reading import sets_or_defines

    names = set()
    for own in cls.__mro__:
        if not _from_ray(own) and own.__module__ != "builtins":
            names |= set(re.findall(r"self\.(_[a-z]\w*)", inspect.getsource(own)))
    return {name for name in names if sets_or_defines(cls, name)}


def test_every_private_attribute_inherited_from_ray_is_listed() -> None:
    """hpo's subclasses also read and set Ray's private attributes: hpo.ray_adapters.tune_guards
    lists each (and checks Ray still sets it)."""
    from hpo.ray_adapters.reading import ray_class
    from hpo.ray_adapters.tune_guards import INHERITED_STATE, OVERRIDDEN_HOOKS

    hooks = {hook.name for hook in OVERRIDDEN_HOOKS}
    unlisted, used = [], set()
    for cls in _ray_subclasses():
        for name in _inherited_private_state(cls) - hooks:
            used.add(name)
            if not any(listed == name and issubclass(cls, ray_class(path))
                       for path, listed in INHERITED_STATE):
                unlisted.append(f"{cls.__qualname__}: self.{name}")
    assert unlisted == []
    assert used == {name for _, name in INHERITED_STATE}  # none listed that is not used


def test_the_attribute_check_catches_an_unlisted_one() -> None:
    from ray.tune.search.optuna import OptunaSearch

    class Sneaky(OptunaSearch):
        def peek(self) -> Any:
            return self._ot_trials, self._metric, self._mine  # Ray's, Ray's, hpo's own

    assert _inherited_private_state(Sneaky) == {"_ot_trials", "_metric"}


def test_outside_a_trial_there_is_no_session() -> None:
    from hpo.ray_adapters import train_session
    from hpo.trial import cost, session

    assert train_session.train_session() is None
    assert train_session.trial_storage() is None and train_session.last_report_time() is None
    assert session.trial_folder() is None and cost.current() is None


def test_lean_head_applies_to_the_block_only() -> None:
    from ray._private import services, utils
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    from hpo.ray_adapters.fast_start.lean_head import lean_head

    rays, rays_check = Node.start_api_server, utils.get_dashboard_dependency_error
    rays_get_node, rays_start = services.get_node, services.start_ray_process
    with lean_head():
        during = RayParams(num_cpus=1)
        assert Node.start_api_server is not rays
        assert utils.get_dashboard_dependency_error is not rays_check
        assert services.get_node is not rays_get_node
        assert services.start_ray_process is not rays_start
    assert services.get_node is rays_get_node
    assert services.start_ray_process is rays_start
    after = RayParams()
    assert (during.no_monitor, during.include_log_monitor, during.num_cpus) == (True, False, 1)
    assert (after.no_monitor, after.include_log_monitor) == (False, None)
    assert Node.start_api_server is rays
    assert utils.get_dashboard_dependency_error is rays_check


def test_the_dashboard_dependency_look_agrees_with_rays_import(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same answer as Ray's own check (which imports the packages): at once where a
    package is not installed, from Ray's import where all seem to be (a namespace package
    such as opentelemetry may lack the part Ray imports)."""
    import importlib.util

    from ray._private import utils

    from hpo.ray_adapters.fast_start.dashboard_agent import dashboard_deps_missing
    from hpo.ray_adapters.fast_start.lean_head import lean_head

    rays = utils.get_dashboard_dependency_error()
    with lean_head():
        ours = utils.get_dashboard_dependency_error()
    assert (ours is None) == (rays is None)
    missing = dashboard_deps_missing()
    assert missing is None or missing.name == rays.name  # here: aiohttp_cors is not installed
    asked: list[str] = []
    monkeypatch.setattr(utils, "get_dashboard_dependency_error",
                        lambda: asked.append("ray") or rays)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # every package found
                        lambda name, *args: real_find_spec("json" if "." not in name else name))
    with lean_head():
        assert utils.get_dashboard_dependency_error() is rays
    assert asked == ["ray"]


class _Trial:
    trial_id = "t1"


def test_node_losses_are_forgiven_then_counted_and_the_hook_restored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.exceptions import RayActorError
    from ray.tune.experiment.trial import Trial

    from hpo.ray_adapters.node_loss import FORGIVEN, NODE_DIED, node_losses_forgiven

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


def test_an_attribute_ray_no_longer_sets_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpo.ray_adapters import tune_guards

    gone = ("ray.tune.search.optuna.optuna_search.OptunaSearch", "_study_of_old")
    monkeypatch.setattr(tune_guards, "INHERITED_STATE", (*tune_guards.INHERITED_STATE, gone))
    assert tune_guards.missing() == [".".join(gone)]


def test_a_config_key_ray_does_not_name_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both adapters that set `_system_config` keys name one Ray's library lacks (one check,
    hpo.ray_adapters.reading.unknown_config_keys)."""
    from hpo.ray_adapters import reading
    from hpo.ray_adapters.fast_start import fork_server, lean_head

    assert reading.unknown_config_keys(
        ["raylet_client_num_connect_attempts", "raylet_client_num", "no_such_key"]) == [
        "raylet_client_num", "no_such_key"]  # a name's head is not the name
    monkeypatch.setattr(lean_head, "NODE_CONFIG",
                        {**lean_head.NODE_CONFIG, "gone_node_key": 1})
    assert lean_head.missing() == ["Ray config gone_node_key"]
    real = fork_server.system_config
    monkeypatch.setattr(fork_server, "system_config", lambda: {**real(), "gone_fork_key": 0})
    assert fork_server.missing() == ["Ray config gone_fork_key"]


def test_an_artifact_sync_inside_its_period_ends_before_any_path_or_listing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside the sync period a result's artifact sync returns before Ray builds a path or
    lists the working dir; the first, those after the period and forced ones are Ray's own
    (they list the dir; the first sets the period's start)."""
    import os
    import time

    from ray.train import SyncConfig
    from ray.train._internal.storage import StorageContext

    from hpo.ray_adapters import train_session

    rays = StorageContext.persist_artifacts
    monkeypatch.setattr(StorageContext, "persist_artifacts", rays)  # Ray's again after the test
    train_session.artifact_syncs_timed_first()
    train_session.artifact_syncs_timed_first()  # once: not wrapped twice
    assert StorageContext.persist_artifacts.__wrapped__ is rays
    working = tmp_path / "working"
    working.mkdir()
    (working / "stdout").write_text("a trial's output\n")
    monkeypatch.setattr(StorageContext, "trial_working_directory", property(
        lambda self: str(working)))
    listed: list[Any] = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: listed.append(path) or real_scandir(path))
    storage = StorageContext(storage_path=str(tmp_path / "store"), experiment_dir_name="exp",
                             trial_dir_name="trial",
                             sync_config=SyncConfig(sync_artifacts=True, sync_period=300))
    storage.persist_artifacts()  # the first: Ray's, which syncs and starts the period
    storage.syncer.wait()
    assert listed == [str(working)]
    assert storage.syncer.last_sync_up_time > time.time() - 60
    storage.persist_artifacts()  # inside the period
    assert listed == [str(working)]
    storage.persist_artifacts(force=True)
    assert listed == [str(working)] * 2
    storage.syncer.last_sync_up_time -= 301  # the period has passed
    storage.persist_artifacts()
    storage.syncer.wait()
    assert listed == [str(working)] * 3


def test_a_registered_node_is_found_at_once_and_an_unknown_one_not(tmp_path: Path) -> None:
    """The look `ray.init` makes before Ray's own (which sleeps 1 s between its looks)."""
    import ray
    from ray._raylet import NodeID

    from hpo.driver.backends.ray_session import embedded_ray
    from hpo.ray_adapters.fast_start.lean_head import registered

    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        gcs = ray._private.worker.global_worker.node.gcs_address
        assert registered(gcs, ray.get_runtime_context().get_node_id(), wait_s=5)
        assert not registered(gcs, NodeID.from_random().hex(), wait_s=0.2)


def _timeline_within(seconds: float) -> list[Any]:
    """ray.timeline() (the task events the GCS holds) once it has any, or at the deadline."""
    import time

    import ray

    deadline = time.monotonic() + seconds
    while not (events := ray.timeline()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return events


def test_the_embedded_node_looks_for_sockets_often_and_records_no_task_events(
        tmp_path: Path) -> None:
    """Ray's look for a Unix socket not made yet (the raylet's for its object store's, at
    its start) retries every 20 ms instead of every second, as long in all, as the driver
    and a worker read their config; and no task events are recorded (the dashboard's, which
    an embedded run has not): the node's config, as its GCS was started with it."""
    import base64
    import json

    import ray
    from ray._private import ray_constants
    from ray._raylet import Config

    from hpo.driver.backends.ray_session import embedded_ray
    from hpo.ray_adapters.fast_start.lean_head import NODE_CONFIG

    def connect_config() -> tuple[int, int]:
        return (Config.raylet_client_connect_timeout_milliseconds(),
                Config.raylet_client_num_connect_attempts())

    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        in_driver = connect_config()
        in_worker = ray.get(ray.remote(num_cpus=1)(connect_config).remote())
        timeline = _timeline_within(3.0)  # Ray sends task events every 1 s by default
        node = ray._private.worker._global_node
        gcs = node.all_processes[ray_constants.PROCESS_TYPE_GCS_SERVER][0].process.pid
        args = Path(f"/proc/{gcs}/cmdline").read_bytes().decode().split("\0")
    config_list = next(arg for arg in args if arg.startswith("--config_list="))
    node_config = json.loads(base64.b64decode(config_list.split("=", 1)[1]))
    assert in_driver == in_worker == (20, 500)  # as long in all as Ray's 10 looks of 1 s
    assert node_config.items() >= NODE_CONFIG.items()
    assert timeline == []


def test_a_run_named_as_one_staged_this_second_waits_for_the_next(tmp_path: Path) -> None:
    """Tune stages a run's files under the second it started: a run of the same name in the
    same second on a kept Ray took the last one's trial folders along (the full suite once
    found two trials of an earlier test in a test's experiment)."""
    from ray.train.constants import _get_ray_train_session_dir
    from ray.tune.utils import date_str

    from hpo.driver.backends.ray_session import embedded_ray
    from hpo.ray_adapters.tune_fit import staged_apart

    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        second = date_str()
        Path(_get_ray_train_session_dir(), second, "b").mkdir(parents=True)
        staged_apart("b")
        assert date_str() != second
        staged_apart("other")  # no folder of its own this second: no wait, no error


def test_tunes_fit_reads_no_trials_results_back_within_the_block(tmp_path: Path) -> None:
    """Tune's fit ends by reading every trial's result.json into a DataFrame for the grid it
    returns (hpo drops it): within no_result_frames it reads none, and the rows are on disk
    as before."""
    from ray import tune

    from hpo.driver.backends.ray_session import embedded_ray
    from hpo.ray_adapters.tune_fit import no_result_frames

    def three(config: dict[str, Any]) -> None:
        for step in range(3):
            tune.report({"step": step})

    def fit(name: str) -> Any:
        return tune.Tuner(three, run_config=tune.RunConfig(
            name=name, storage_path=str(tmp_path), verbose=0)).fit()[0]

    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        with no_result_frames():
            within = fit("within")
        after = fit("after")
    assert within.metrics_dataframe is None
    assert len((Path(within.path) / "result.json").read_text().splitlines()) == 3
    assert list(after.metrics_dataframe["step"]) == [0, 1, 2]


def test_tunes_registry_asks_the_gcs_once_per_entry_within_the_block(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tune looks a trainable up by name several times a trial, each look a round trip to
    the GCS: within registry_read_once the first look asks, the others answer from memory
    with what Tune itself answers, and registering again asks anew."""
    from ray.tune import registry

    from hpo.driver.backends.ray_session import embedded_ray
    from hpo.ray_adapters.tune_fit import registry_read_once

    asked: list[bytes] = []
    ask = registry._internal_kv_get
    monkeypatch.setattr(registry, "_internal_kv_get", lambda key: asked.append(key) or ask(key))

    def first(config: dict[str, Any]) -> None:
        pass

    def second(config: dict[str, Any]) -> None:
        pass

    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        registry.register_trainable("looked_up", first)
        tunes_own = registry.get_trainable_cls("looked_up")
        asked.clear()
        with registry_read_once():
            looks = [registry.get_trainable_cls("looked_up") for _ in range(5)]
            after_first = len(asked)
            registry.register_trainable("looked_up", second)
            again = registry.get_trainable_cls("looked_up")
            within = len(asked)
        outside = registry.get_trainable_cls("looked_up")
    assert after_first == 2  # the first look's contains and get; none after
    assert all(look is tunes_own for look in looks)
    assert within == 4 and again is outside is not tunes_own
