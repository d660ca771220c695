"""hpo: hyperparameter tuning for deep learning on Slurm clusters, on top of Ray Tune.

Inside a trainable use `hpo.report` and `hpo.get_checkpoint`; from Python, `hpo.run`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpo.errors import ConfigError, ExperimentError, HpoError, RunError, TrainableImportError
from hpo.session import get_checkpoint, report

if TYPE_CHECKING:
    from hpo.runner import RunResult

__all__ = [
    "ConfigError", "ExperimentError", "HpoError", "RunError", "TrainableImportError",
    "get_checkpoint", "load_spec", "report", "resume", "run",
]
__version__ = "0.1.0"


def load_spec(path: str, overrides: list[str] | None = None) -> Any:
    """Read and validate an experiment YAML (see `hpo.yaml_io.load_spec`)."""
    from hpo.yaml_io import load_spec as _load

    return _load(path, overrides)


def run(spec: Any, **options: Any) -> RunResult:
    """Run an experiment from a Spec, a dict or a YAML path (see `hpo.runner.run`)."""
    from hpo.runner import run as _run

    return _run(spec, **options)


def resume(experiment_dir: str, **options: Any) -> RunResult:
    """Continue an interrupted experiment (see `hpo.runner.resume`)."""
    from hpo.runner import resume as _resume

    return _resume(experiment_dir, **options)
