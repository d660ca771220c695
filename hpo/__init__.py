"""hpo: hyperparameter tuning for deep learning on Slurm clusters, on top of Ray Tune.

Inside a trainable use `hpo.report` and `hpo.get_checkpoint` (and `hpo.dist`,
`hpo.large_batch` for data-parallel training); from Python, `hpo.run` and `hpo.resume`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpo.errors import ConfigError, ExperimentError, HpoError, RunError, TrainableImportError
from hpo.session import get_checkpoint, report

if TYPE_CHECKING:  # the driver imports Ray and pandas: only when a run starts
    from hpo.cluster.auth import RayCluster
    from hpo.driver.runner import RunResult
    from hpo.spec import Spec

__all__ = [
    "ConfigError", "ExperimentError", "HpoError", "RunError", "TrainableImportError",
    "get_checkpoint", "load_spec", "report", "resume", "run",
]
__version__ = "0.1.0"


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


def run(spec: Spec | dict[str, Any] | str | Path, *, storage: str | None = None,
        name: str | None = None, num_cpus: int | None = None, source: str = "<spec>",
        cluster: RayCluster | None = None) -> RunResult:
    """Run an experiment on an embedded local Ray, or on a running cluster.

    Args:
        spec: a Spec, the YAML's mapping, or the path of a YAML file.
        storage: results root (default: the spec's `storage`); the folder is storage/name.
        name: experiment folder name (default: the spec's `name`).
        num_cpus: CPUs of the embedded Ray (default: all of this machine's).
        source: how errors name the spec (a file name).
        cluster: a running Ray cluster to use instead (a Slurm job's own).

    Returns:
        RunResult: the folder, one row per trial (pandas) and the best config.

    Example:
        >>> result = hpo.run("search_spaces/digits-asha.yaml", storage="/tmp/r")
        >>> result.best_config
    """
    from hpo.driver.runner import run as _run

    return _run(spec, storage=storage, name=name, num_cpus=num_cpus, source=source,
                cluster=cluster)


def resume(experiment_dir: str | Path, *, num_cpus: int | None = None,
           cluster: RayCluster | None = None) -> RunResult:
    """Continue an interrupted experiment: finished trials stay, unfinished ones continue
    from their last checkpoint, errored ones are retried.

    Args:
        experiment_dir: the experiment folder (it holds hpo-spec.yaml).
        num_cpus: CPUs of the embedded Ray (default: all).
        cluster: a running Ray cluster to use instead.

    Returns:
        RunResult, as `run` gives it.
    """
    from hpo.driver.runner import resume as _resume

    return _resume(experiment_dir, num_cpus=num_cpus, cluster=cluster)
