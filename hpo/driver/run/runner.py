"""Spec -> Ray Tune objects -> a run (fresh or resumed) -> results as pandas."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from hpo.cluster.auth import RayCluster
from hpo.driver.backends import backend_for
from hpo.driver.backends.ray_session import check_connectable, preload_for, starts_per_core
from hpo.driver.guards import storage_faults
from hpo.driver.guards.lease import experiment_lease
from hpo.driver.guards.start_stop import (
    StoppedAtStart,
    ray_starts,
    rearm,
    start_stops,
    tune_takes_over,
)
from hpo.driver.guards.storage_faults import check_resumable, storage_guard
from hpo.driver.guards.walltime import WalltimeGuard, active
from hpo.driver.run import preflight, translate
from hpo.driver.run.fit_errors import said_in_one_line
from hpo.driver.run.fresh import already_here, start_again
from hpo.driver.run.outcome import LOG_FILE, RunResult, outcome
from hpo.driver.run.trainable import python_name
from hpo.errors import ConfigError, ExperimentError, LeaseError
from hpo.ray_adapters import gate, tune_fit
from hpo.ray_adapters.fast_start import runtime_env
from hpo.ray_adapters.tune_actors import start_cap
from hpo.results import SPEC_FILE, load_results, loading, saved_spec
from hpo.spec.load import load_spec, spec_from_dict
from hpo.spec.model import PYTHON_TRAINABLE, Spec
from hpo.spec.plan import trial_count
from hpo.trial.one_process import objects_in_store


def _as_spec(spec: Spec | dict[str, Any] | str | Path, source: str,
             trainable: Any = None) -> tuple[Spec, str]:
    """The validated spec; `trainable` (from Python) replaces or fills in its trainable."""
    if isinstance(spec, (str, Path)):  # a YAML file for Python use may leave trainable out
        source = str(spec)
        spec = load_spec(spec, [f"trainable={PYTHON_TRAINABLE}:x"] if trainable else None)
    elif isinstance(spec, dict):
        source = "<dict>"
    if trainable is None:
        return (spec if isinstance(spec, Spec) else spec_from_dict(spec, source)), source
    data = spec.model_dump(exclude={"trainable"}, exclude_unset=True) if isinstance(
        spec, Spec) else spec
    return spec_from_dict({**data, "trainable": trainable}, source), source


@contextlib.contextmanager
def _ray_for(spec: Spec, source: str, exp_dir: Path, num_cpus: int | None,
             cluster: RayCluster | None = None, keep_ray: bool = False) -> Iterator[None]:
    backend = backend_for(cluster, exp_dir / LOG_FILE, num_cpus=num_cpus, keep=keep_ray)
    ray_starts()  # a stop now waits until Ray is up: it must not land inside Ray's start
    resources = backend.start()
    try:
        import ray

        rearm()  # ray.init put its own SIGTERM handler in place
        preflight.on_cluster(spec, source, resources,
                             [n["Resources"] for n in ray.nodes() if n["Alive"]])
        yield
    except BaseException as exc:
        backend.close(exc)
        raise
    backend.close()


@contextlib.contextmanager
def _ray_and_trainable(spec: Spec, source: str, exp_dir: Path, num_cpus: int | None,
                       cluster: RayCluster | None, parameters: dict[str, Any] | None = None,
                       keep_ray: bool = False) -> Iterator[Any]:
    """Ray, and the trainable imported in a thread meanwhile: importing torch (about 2 s)
    overlaps `ray.init` (about 3 s, mostly waiting for Ray's processes), as do Tune and
    tensorboardX (about 1.5 s). `parameters` go into
    Ray's object store once, for the whole run."""
    with ThreadPoolExecutor(1, thread_name_prefix="hpo-import") as pool:
        importing = pool.submit(translate.user_trainable, spec, source, parameters)
        ahead = pool.submit(translate.import_ahead)  # meanwhile too: what the driver needs next
        with _ray_for(spec, source, exp_dir, num_cpus, cluster, keep_ray):
            func, objects = importing.result()
            # before this thread imports Tune itself: two threads importing pandas at once
            # can fail ("partially initialized module"; seen once on a connected cluster)
            ahead.result()
            preload_for(func)
            with objects_in_store(objects) as holder:
                yield translate.trainable(spec, func, holder)


def run(spec: Spec | dict[str, Any] | str | Path, *, trainable: Any = None,
        parameters: dict[str, Any] | None = None, callbacks: list[Any] | None = None,
        storage: str | None = None, name: str | None = None, num_cpus: int | None = None,
        source: str = "<spec>", cluster: RayCluster | None = None,
        keep_ray: bool = True, time_limit_s: float | None = None,
        fresh: bool = False) -> RunResult:
    """Run an experiment on an embedded Ray, or on `cluster` (a running one, e.g. a Slurm
    job's own); the folder is `<storage>/<name>`. `trainable` (a function or Ray Tune class)
    replaces the spec's; `parameters` reach every trial by reference; `callbacks` go to Tune;
    `keep_ray` leaves the embedded Ray running for the next run in this process;
    `time_limit_s` ends the run like a Slurm job's time limit (hpo.driver.guards.walltime);
    `fresh` starts again in a folder whose earlier run finished no trial (hpo.driver.run.fresh).

    Example:
        >>> result = hpo.run("search_spaces/digits-asha.yaml", storage="/tmp/r")
        >>> result.best_config
    """
    spec, source = _as_spec(spec, source, trainable)
    preflight.before_ray(spec, source)
    preflight.check_parameters(parameters, source)
    num_cpus = preflight.check_num_cpus(num_cpus, source)
    check_connectable(cluster, source)
    guard = _walltime(spec, source, time_limit_s)
    exp_dir = Path(storage or spec.storage).expanduser().resolve() / (name or spec.name)
    made_here = not exp_dir.exists()
    try:
        # The lease before the check: two runs started at once raced into one folder.
        with start_stops(), storage_guard(exp_dir), experiment_lease(exp_dir):
            if (exp_dir / SPEC_FILE).exists() and not fresh:
                raise already_here(exp_dir, spec)
            if (exp_dir / SPEC_FILE).exists():
                start_again(exp_dir)  # refuses where a trial finished
                made_here = True  # emptied: as if made here, should this run fail too
            mirror = _optuna_mirror(spec, source, exp_dir.name)  # a bad optuna_storage fails
            with _ray_and_trainable(spec, source, exp_dir, num_cpus, cluster, parameters,
                                    keep_ray) as tune_trainable:
                evaluated = _warm_start(spec)  # a bad folder fails before the spec is written
                (exp_dir / SPEC_FILE).write_text(yaml.safe_dump(_portable(spec),
                                                                sort_keys=False))
                with active(guard):  # the scheduler finds it with walltime.current()
                    tuner = translate.tuner(spec, tune_trainable, exp_dir,
                                            [*mirror, *(callbacks or [])], evaluated)
                    tune_takes_over()
                    _fit(tuner, spec, exp_dir.name)
                frame = loading(exp_dir)  # while Ray stops
    except BaseException as exc:
        # (not where another run holds the folder: it made it, and may be starting in it)
        if made_here and (isinstance(exc, StoppedAtStart) or (
                not isinstance(exc, LeaseError) and _nothing_ran(exp_dir))):
            # leave no folder behind that `hpo run` would refuse and `hpo resume` could not
            # continue (a trainable or a search space Ray refused as it started)
            shutil.rmtree(exp_dir, ignore_errors=True)
        raise
    return outcome(exp_dir, spec, frame.result())


def _nothing_ran(exp_dir: Path) -> bool:
    """No trial folder and no saved experiment state: nothing to resume, nothing lost."""
    return exp_dir.is_dir() and not any(
        path.is_dir() or path.name.startswith("experiment_state-") for path in exp_dir.iterdir())


def _warm_start(spec: Spec) -> list[tuple[dict[str, Any], list[float]]] | None:
    """The earlier experiment's trials for Optuna (a fresh run only: a resumed one has them
    in its saved study); says how many on stderr."""
    if spec.search.warm_start is None:  # imports ray.tune: not before Ray starts
        return None
    from hpo.driver.plugins.warm_start import earlier_trials

    return earlier_trials(spec)


def _optuna_mirror(spec: Spec, source: str, study_name: str) -> list[Any]:
    if spec.optuna_storage is None:  # the mirror imports ray.tune: not before Ray starts
        return []
    from hpo.optuna.mirror import mirror_for

    return mirror_for(spec, source, study_name)


def _portable(spec: Spec) -> dict[str, Any]:
    """The spec as YAML data, with a file trainable made absolute so resume finds it; one
    from Python only named (`<python>:train`): `hpo.resume(path, trainable=...)` needs it."""
    # resources are refused beside distributed: a data-parallel spec saves none (resume)
    data = spec.model_dump(mode="json", exclude={"trainable", *(
        ["resources"] if spec.distributed else [])})
    if not isinstance(spec.trainable, str):
        return {"name": data.pop("name"), "trainable": python_name(spec.trainable), **data}
    target, _, func = spec.trainable.rpartition(":")
    ref = f"{Path(target).resolve()}:{func}" if target.endswith(".py") else spec.trainable
    return {"name": data.pop("name"), "trainable": ref, **data}


def resume(experiment_dir: str | Path, *, trainable: Any = None,
           parameters: dict[str, Any] | None = None, num_cpus: int | None = None,
           cluster: RayCluster | None = None, keep_ray: bool = True,
           time_limit_s: float | None = None) -> RunResult:
    """Continue an interrupted experiment: finished trials stay, unfinished ones continue
    from their last checkpoint, errored ones are retried. One started from Python needs its
    `trainable` (and `parameters`) again; `time_limit_s` as for `run`."""
    exp_dir = Path(experiment_dir).expanduser().resolve()
    source = str(exp_dir / SPEC_FILE)
    spec = _saved_spec(exp_dir, source, trainable)
    preflight.check_parameters(parameters, source)
    num_cpus = preflight.check_num_cpus(num_cpus, source)
    check_resumable(exp_dir)  # a damaged state: its one line, before anything reads it
    if _finished(exp_dir, spec):  # nothing to continue: no Ray, the results as they are
        return dataclasses.replace(outcome(exp_dir, spec), finished_already=True)
    _check_trainable_given(exp_dir, spec)  # not needed above: `hpo resume` says it finished
    preflight.before_ray(spec, source)
    check_connectable(cluster, source)
    guard = _walltime(spec, source, time_limit_s)
    with (start_stops(), storage_guard(exp_dir), experiment_lease(exp_dir, "resume"),
          _ray_and_trainable(spec, source, exp_dir, num_cpus, cluster, parameters,
                             keep_ray) as tune_trainable, active(guard)):
        check_resumable(exp_dir)  # under the lease; Tune would start a damaged one afresh
        from ray import tune  # loaded by the import thread meanwhile

        tuner = tune.Tuner.restore(str(exp_dir), trainable=tune_trainable,
                                   resume_unfinished=True, resume_errored=True)
        tune_takes_over()
        _fit(tuner, spec, exp_dir.name)
        frame = loading(exp_dir)  # while Ray stops
    return outcome(exp_dir, spec, frame.result())


def _finished(exp_dir: Path, spec: Spec) -> bool:
    """Every trial the spec asks for ran to its end (none errored, paused or waiting)."""
    frame = load_results(exp_dir)
    statuses = set(frame["status"]) if len(frame) else set()
    enough = spec.time_budget_s is not None or len(frame) >= trial_count(spec)
    return statuses == {"TERMINATED"} and enough


def _walltime(spec: Spec, source: str, time_limit_s: float | None) -> WalltimeGuard | None:
    """The run's walltime guard: the allocation's end (inside Slurm) or the time limit; its
    margin is slurm.signal_seconds, the time kept to stop and save."""
    margin = spec.slurm.signal_seconds
    if time_limit_s is not None and time_limit_s <= margin:
        raise ConfigError(source, "--time-limit", f"must be longer than slurm.signal_seconds "
                          f"({margin} s), the margin kept to stop and save (got "
                          f"{time_limit_s:g})", "raise the limit or lower slurm.signal_seconds")
    return WalltimeGuard.from_environment(time_limit_s=time_limit_s, margin_s=margin)


def _saved_spec(exp_dir: Path, source: str, trainable: Any) -> Spec:
    data = saved_spec(exp_dir)
    return spec_from_dict(data if trainable is None else {**data, "trainable": trainable},
                          source)


def _check_trainable_given(exp_dir: Path, spec: Spec) -> None:
    """A run started from Python continues only with its trainable given again (a finished
    one answers without it)."""
    saved = spec.trainable if isinstance(spec.trainable, str) else ""
    if saved.startswith(f"{PYTHON_TRAINABLE}:"):
        name = saved.partition(":")[2]
        raise ExperimentError(f"{exp_dir}: started from Python with the trainable {name}, which "
                              f"{SPEC_FILE} cannot hold. Hint: resume it from Python: "
                              f"hpo.resume('{exp_dir}', trainable={name}) (with parameters=... "
                              "if the run had them)")


def _tune_patched(spec: Spec) -> contextlib.ExitStack:
    """Tune's fit with each of hpo's changes that the gate turns on (hpo.ray_adapters)."""
    from hpo.driver.guards.snapshot_deletes import deleted_after_snapshot
    from hpo.ray_adapters.node_loss import node_losses_forgiven

    stack = contextlib.ExitStack()
    for name, patch in (
            ("node-loss", node_losses_forgiven),
            ("snapshot-deletes", deleted_after_snapshot),
            ("trial-reports", lambda: translate.result_batches(spec)),
            ("fit-speed", lambda: tune_fit.faster_fit(start_cap(starts_per_core()))),
            ("pbt-pause", tune_fit.no_stop_left_by_a_pause),
            ("save-race", tune_fit.no_train_during_a_save),
            ("interrupt-cleanup", tune_fit.trials_ended_on_interrupt),
            ("runtime-env-gate", lambda: runtime_env.trial_actors_without_runtime_env(
                runtime_env.workers_environ()))):
        stack.enter_context(gate.applied(name, patch))
    return stack


def _fit(tuner: Any, spec: Spec, name: str) -> None:
    from hpo.driver.guards.stops import signals_restored

    try:
        with said_in_one_line(spec), signals_restored(), _tune_patched(spec):
            if gate.is_on("staged-apart"):
                tune_fit.staged_apart(name)
            tuner.fit()
    finally:  # a storage fault's stop: Tune's own last sync may have cut a state file
        watch = storage_faults.current()
        if watch is not None:
            watch.settle_state()
