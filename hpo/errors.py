"""The one exception tree of hpo: the CLI catches HpoError, prints one line, exits."""

from __future__ import annotations


class HpoError(Exception):
    """Root of every error hpo raises on purpose; str() is the one line a user sees."""

    exit_code = 1


class ConfigError(HpoError):
    """The experiment YAML (or a value passed for it) is invalid."""

    exit_code = 2

    def __init__(self, source: str, path: str, message: str, hint: str = "") -> None:
        self.source, self.path, self.message, self.hint = source, path, message, hint
        where = f"{path}: " if path else ""
        tail = f" Hint: {hint}" if hint else ""
        stop = "" if message.endswith(".") else "."
        super().__init__(f"{source}: {where}{message}{stop}{tail}")


class TrainableImportError(ConfigError):
    """The `trainable:` entry names a function that cannot be imported."""


class ExperimentError(HpoError):
    """An experiment folder is missing, unreadable or not an hpo experiment."""

    exit_code = 2


class OutputError(HpoError):
    """A file to write (-o) names a folder, or its folder cannot be made."""

    exit_code = 2


class RunError(HpoError):
    """The run itself failed: trials errored, nothing reported the metric, no resources."""


class SlurmEnvironmentError(HpoError):
    """Not inside a usable Slurm allocation, or its SLURM_* variables cannot be read."""

    exit_code = 2


class NotRunningError(HpoError):
    """The study is not running (no head job to join)."""

    exit_code = 5


class ClusterStartError(HpoError):
    """The job's own Ray cluster did not come up on every node of the allocation."""


class LeaseError(HpoError):
    """Another `hpo run`/`resume` (or Slurm job) is writing the same experiment folder."""

    exit_code = 3


class StorageError(HpoError):
    """The experiment's file system is full, over quota or no longer writable."""

    exit_code = 4


class TrialErrorsWarning(UserWarning):
    """From Python: a run returned with trials that failed after their retries (its result
    holds the others); the `hpo` command says it as an error line and exits 1 instead."""


def not_a_number(metric: str, value: object) -> str:
    """The one line for a metric reported as something else than a number (a str, a tensor):
    said at the report, and by a run or `hpo best` whose trials never reported it as one."""
    shown = " ".join(repr(value).split())  # a tensor's repr spans lines
    shown = shown if len(shown) <= 40 else f"{shown[:37]}..."
    kind = type(value).__name__
    kind = f"an {kind}" if kind[0] in "aeiou" or kind == "ndarray" else f"a {kind}"
    return (f"the metric '{metric}' was reported as {kind} ({shown}), "
            f"not a number. Hint: report a number, e.g. hpo.report({{'{metric}': float(...)}})")
