"""The `tracking:` section as Tune callbacks: Ray's MLflow and W&B loggers, with the MLflow
run of each trial kept in the experiment folder so that `hpo resume` continues it.

Only the driver logs: it sees every result a trial reports (rank 0's, for data-parallel
trials), so trials need no tracking code of their own.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.air.integrations.wandb import WandbLoggerCallback
from ray.tune.result import TIMESTEPS_TOTAL, TRAINING_ITERATION

from hpo.driver.guards import storage_faults
from hpo.spec.model import Spec

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

#: trial_id -> MLflow run id, in the experiment folder.
MLFLOW_RUNS_FILE = "mlflow-runs.json"


class ResumableMlflow(MLflowLoggerCallback):
    """Ray's callback keeps trial -> run in memory: a resumed trial would get a second run.
    This one writes the ids next to Tune's state and reopens a trial's run on resume. A full
    or failing store (or experiment folder) is the run's storage fault: the run stops cleanly
    and resumable (hpo.driver.guards.storage_faults) instead of Tune's loop crashing; nothing
    more is written to the store until then."""

    _broken = False

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self._trial_runs: dict[Any, str] = {}  # as Ray's setup leaves it, should it fail
        self._logged: dict[str, int] = {}  # trial id -> the last step its run holds
        for handler in logging.getLogger("mlflow").handlers:  # MLflow's own, to the terminal
            if not any(isinstance(f, _QuietStorageFaults) for f in handler.filters):
                handler.addFilter(_QuietStorageFaults())
        self._guarded(super().setup, *args, **kwargs)

    def log_trial_start(self, trial: Any) -> None:
        self._guarded(self._start, trial)

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        # A trial that restarts from its checkpoint reports the steps after it again; MLflow
        # cannot delete a step, so each step is logged once (its first report).
        step = result.get(TIMESTEPS_TOTAL) or result[TRAINING_ITERATION]
        if step <= self._logged.get(trial.trial_id, 0):
            return
        self._guarded(super().log_trial_result, iteration, trial, result)
        self._logged[trial.trial_id] = step

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        self._guarded(super().log_trial_end, trial, failed)

    def _guarded(self, write: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if self._broken:
            return
        try:
            write(*args, **kwargs)
        except Exception as exc:
            if not storage_faults.absorbed(exc, _store_path(self.tracking_uri)):
                raise
            self._broken = True

    def _start(self, trial: Any) -> None:
        if trial not in self._trial_runs:
            self._reopen(trial)
        super().log_trial_start(trial)
        _write_run(trial, self._trial_runs[trial])

    def _reopen(self, trial: Any) -> None:
        """Take up the trial's run from before a resume, if the store still holds it."""
        known = _read_runs(trial).get(trial.trial_id)
        if not known:
            return
        client = _client()
        if _run_exists(client, known):
            self._trial_runs[trial] = known
            client.update_run(known, status="RUNNING")
            steps = [m.step for m in client.get_metric_history(known, TRAINING_ITERATION)]
            self._logged[trial.trial_id] = max(steps, default=0)


def _client() -> MlflowClient:
    """A client of the store Ray's callback writes to: its setup() set MLflow's tracking and
    registry URIs, and Ray's own helper builds its clients from those (as here)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=mlflow.get_tracking_uri(),
                        registry_uri=mlflow.get_registry_uri())


def _run_exists(client: MlflowClient, run_id: str) -> bool:
    """Whether the store holds this run (any MLflow error counts as no, as in Ray's helper)."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_run(run_id)
    except MlflowException:
        return False
    return True


class _QuietStorageFaults(logging.Filter):
    """MLflow logs a failed write with its traceback before raising it: during a run, a
    storage fault is left out there; the run ends with the one line that names it."""

    def filter(self, record: logging.LogRecord) -> bool:
        fault = record.exc_info and storage_faults.classify(record.exc_info[1])
        return not (fault and storage_faults.current())


def _store_path(uri: str | None) -> str:
    """The store's file for the one line (sqlite:////abs.db, file:///abs/mlruns, a path),
    else its URI."""
    return (uri or "").split(":///", 1)[-1]


def _runs_file(trial: Any) -> Path:
    # The experiment folder where it is now (it may have moved since the callback was pickled).
    return Path(trial.remote_experiment_path) / MLFLOW_RUNS_FILE


def _read_runs(trial: Any) -> dict[str, str]:
    path = _runs_file(trial)
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_run(trial: Any, run_id: str) -> None:
    runs = _read_runs(trial)
    if runs.get(trial.trial_id) == run_id:
        return
    path = _runs_file(trial)
    spare = path.with_suffix(".tmp")
    spare.write_text(json.dumps({**runs, trial.trial_id: run_id}, indent=1))
    spare.replace(path)  # whole or not at all: a crash mid-write must not lose the others


class OfflineAwareWandb(WandbLoggerCallback):
    """Ray's callback asks for an API key unless WANDB_MODE=offline is in the driver's
    environment; an offline run needs none, so the key is only checked when online."""

    def setup(self, *args: Any, **kwargs: Any) -> None:
        if self.kwargs.get("mode") == "online":
            super().setup(*args, **kwargs)
        elif not self.project:  # what setup() checks besides the key
            raise ValueError("W&B needs a project")


def callbacks(spec: Spec, exp_dir: Path) -> list[Any]:
    """Tune callbacks for spec.tracking; the experiment folder's name names the defaults."""
    found: list[Any] = []
    mlflow, wandb = spec.tracking.mlflow, spec.tracking.wandb
    if mlflow:
        found.append(ResumableMlflow(
            tracking_uri=mlflow.tracking_uri, experiment_name=mlflow.experiment_name or spec.name,
            tags={"hpo.experiment": exp_dir.name, **mlflow.tags}))
    if wandb:
        # The runner checks this before Ray starts; here again for callers that build the
        # callbacks themselves: one line instead of Ray's traceback from its logging actor.
        spec.tracking.check_login(str(exp_dir), os.environ)
        # These go to wandb.init in Ray's logging actor (a separate process), which would
        # write into the trial's staging folder in Ray's temp dir, deleted after the run:
        # W&B's files go to WANDB_DIR, else to <experiment>/wandb/.
        found.append(OfflineAwareWandb(project=wandb.project or spec.name,
                                       group=wandb.group or exp_dir.name,
                                       mode=wandb.resolved_mode(os.environ),
                                       dir=os.environ.get("WANDB_DIR") or str(exp_dir)))
    return found
