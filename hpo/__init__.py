"""hpo: hyperparameter tuning for deep learning on Slurm clusters, on top of Ray Tune.

Inside a trainable use `hpo.report` and `hpo.get_checkpoint` (and `hpo.dist`,
`hpo.trial.large_batch` for data-parallel training); from Python, `hpo.run` and `hpo.resume` (with
a function or Ray Tune class as the trainable, `hpo.with_parameters` for large objects),
`hpo.shutdown` to end the Ray they keep between runs, `hpo.load` for an experiment's
results and `hpo.load_checkpoint` for a checkpoint's state (the best model, after a run).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpo.errors import (
    ClusterStartError,
    ConfigError,
    ExperimentError,
    HpoError,
    LeaseError,
    NotRunningError,
    OutputError,
    RunError,
    SlurmEnvironmentError,
    StorageError,
    TrainableImportError,
    TrialErrorsWarning,
)
from hpo.trial.session import get_checkpoint, report

if TYPE_CHECKING:  # the driver imports Ray and pandas: only when a run starts
    from hpo.cluster.auth import RayCluster
    from hpo.driver.run.outcome import RunResult
    from hpo.driver.run.trainable import WithParameters
    from hpo.results import Results
    from hpo.spec import Spec

__all__ = [
    "ClusterStartError", "ConfigError", "ExperimentError", "HpoError", "LeaseError",
    "NotRunningError", "OutputError", "RunError", "SlurmEnvironmentError", "StorageError",
    "TrainableImportError", "TrialErrorsWarning",
    "get_checkpoint", "load", "load_checkpoint", "load_spec", "report", "resume", "run",
    "shutdown", "with_parameters",
]
__version__ = "0.1.0"
# What a trainable imports beside report: `from hpo import dist` (torch is imported only then).
_TRAINABLE_MODULES = {"dist": "hpo.trial.dist", "large_batch": "hpo.trial.large_batch"}


def __getattr__(name: str) -> Any:
    if name in _TRAINABLE_MODULES:
        return importlib.import_module(_TRAINABLE_MODULES[name])
    raise AttributeError(f"module 'hpo' has no attribute {name!r}")


def load_spec(path: str | Path, overrides: list[str] | None = None) -> Spec:
    """Read, override and validate an experiment YAML.

    Args:
        path: the YAML file.
        overrides: `dotted.key=value` items, as `--set` takes them.

    Returns:
        The validated Spec; a bad key or value raises ConfigError (one line, with its path).
    """
    from hpo.spec.load import load_spec as _load

    return _load(path, overrides)


def load(experiment_dir: str | Path) -> Results:
    """An experiment's results, read from its folder alone: while it runs, after it ended,
    after its driver died (no Ray is started).

    Args:
        experiment_dir: the experiment folder (<storage>/<name>).

    Returns:
        Results: `.trials` (pandas, one row per trial, best first: config/*, best_<metric>,
        each reported metric's last value, status...), `.curves` (one row per trial and
        training_iteration, a column per metric), `.best_config`, `.best_checkpoint` (the
        best trial's best checkpoint folder, with `checkpoint.keep_best: true`) and, with
        several objectives, `.pareto_front` (the rows of the non-dominated trials).

    Example:
        >>> results = hpo.load("hpo-results/digits-asha")
        >>> results.curves.groupby("trial_id")["val_loss"].min()
    """
    from hpo.results import load as _load

    return _load(experiment_dir)


def load_checkpoint(folder: str | Path) -> Any:
    """A checkpoint's state outside a trial (`hpo.get_checkpoint` works only inside one).

    Args:
        folder: a checkpoint folder: `hpo.load(DIR).best_checkpoint`, or a trial's
            checkpoint_* folder.

    Returns:
        What the trainable handed to `hpo.report(..., checkpoint=...)`: the dict (tensors
        saved on a GPU come back on this process's GPU, or the CPU without one), or the
        path of the directory it handed over; a Ray Tune class trainable's checkpoint: the
        folder's own path.

    Example:
        >>> state = hpo.load_checkpoint(hpo.load("hpo-results/digits-asha").best_checkpoint)
        >>> model.load_state_dict(state["model"])
    """
    from hpo.trial import checkpoint_files

    return checkpoint_files.load(folder)


def run(spec: Spec | dict[str, Any] | str | Path, *, trainable: Callable[..., Any] | None = None,
        parameters: dict[str, Any] | None = None, callbacks: list[Any] | None = None,
        storage: str | None = None, name: str | None = None, num_cpus: int | None = None,
        source: str = "<spec>", cluster: RayCluster | None = None,
        keep_ray: bool = True, time_limit_s: float | None = None,
        fresh: bool = False) -> RunResult:
    """Run an experiment on an embedded local Ray, or on a running cluster.

    Args:
        spec: a Spec, the YAML's mapping, or the path of a YAML file; its `trainable` may be
            a function, closure, functools.partial or ray.tune.Trainable class.
        trainable: the function or class to tune, instead of the spec's `trainable`.
        parameters: large objects (datasets, models) every trial gets as keyword arguments,
            `trainable(config, **parameters)`: put in Ray's object store once, not copied
            into each trial's config (as `with_parameters`).
        callbacks: Ray Tune callbacks (`ray.tune.Callback`), e.g. your own on_trial_result.
        storage: results root (default: the spec's `storage`); the folder is storage/name.
        name: experiment folder name (default: the spec's `name`).
        num_cpus: CPUs of the embedded Ray (default: all of this machine's).
        source: how errors name the spec (a file name).
        cluster: a running Ray cluster to use instead (a Slurm job's own).
        keep_ray: leave the embedded Ray running for the next run in this process (a
            notebook's next run skips Ray's start-up); `hpo.shutdown()` ends it.
        time_limit_s: stop the run this many seconds from now, saved and resumable, as a
            Slurm job's time limit would (`hpo run --time-limit`).
        fresh: where the folder holds an earlier run none of whose trials finished (it
            failed: a metric typo), empty it and start again (`hpo run --fresh`); where a
            trial finished, ExperimentError names them and nothing is deleted.

    Returns:
        RunResult: the folder, one row per trial (pandas) and the best config.

    Example:
        >>> result = hpo.run("search_spaces/digits-asha.yaml", storage="/tmp/r")
        >>> result.best_config
    """
    from hpo.driver.run.runner import run as _run

    return _said(_run(spec, trainable=trainable, parameters=parameters, callbacks=callbacks,
                      storage=storage, name=name, num_cpus=num_cpus, source=source,
                      cluster=cluster, keep_ray=keep_ray, time_limit_s=time_limit_s,
                      fresh=fresh))


def resume(experiment_dir: str | Path, *, trainable: Callable[..., Any] | None = None,
           parameters: dict[str, Any] | None = None, num_cpus: int | None = None,
           cluster: RayCluster | None = None, keep_ray: bool = True,
           time_limit_s: float | None = None) -> RunResult:
    """Continue an interrupted experiment: finished trials stay, unfinished ones continue
    from their last checkpoint, errored ones are retried.

    Args:
        experiment_dir: the experiment folder (it holds hpo-spec.yaml).
        trainable: the function or class the run was started with from Python (its
            hpo-spec.yaml can only name it); replaces the saved one otherwise.
        parameters: the large objects the run was started with, if any.
        num_cpus: CPUs of the embedded Ray (default: all).
        cluster: a running Ray cluster to use instead.
        keep_ray: leave the embedded Ray running for the next run, as in `run`.
        time_limit_s: as in `run`.

    Returns:
        RunResult, as `run` gives it.
    """
    from hpo.driver.run.runner import resume as _resume

    return _said(_resume(experiment_dir, trainable=trainable, parameters=parameters,
                         num_cpus=num_cpus, cluster=cluster, keep_ray=keep_ray,
                         time_limit_s=time_limit_s))


def _said(result: RunResult) -> RunResult:
    """The result, with a TrialErrorsWarning (the `hpo` command's error line) where trials
    failed after their retries: the caller gets the others' results and hears why."""
    if result.errors:
        import warnings

        warnings.warn(result.errors_summary(), TrialErrorsWarning, stacklevel=3)
    return result


def with_parameters(trainable: Callable[..., Any], **objects: Any) -> WithParameters:
    """The trainable, called as `trainable(config, **objects)` in every trial (a class:
    `setup(config, **objects)`); each object goes into Ray's object store once per run, and
    data-parallel ranks read it from there too (numpy arrays: shared memory, read-only).

    Example:
        >>> hpo.run(spec, trainable=hpo.with_parameters(train, data=big_array))
    """
    from hpo.driver.run.trainable import with_parameters as _bind

    return _bind(trainable, **objects)


def shutdown() -> None:
    """End the embedded Ray that `run`/`resume` keep between runs (no-op if none)."""
    from hpo.driver.backends.ray_session import shutdown as _shutdown

    _shutdown()
