"""Every reach of the driver's run, guards and plugins into Ray's private parts, in one place, as
read from Ray 2.60.0 (RASDA's reaches into Tune are in hpo.ray_adapters.tune_rasda, the
changes to Tune's fit for a run's speed in hpo.ray_adapters.tune_fit, those to the embedded
Ray's start in hpo.ray_adapters.fast_start.lean_head).

Ray names none of these public; tests/driver/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - ray.tune.experiment.trial.Trial._handle_ray_actor_error(self, exc): what Tune does when a
    trial's actor dies (a RayActorError: counted against max_failures unless preempted),
    replaced for a block by a handler that may forgive the death or hand it on;
  - Trial.run_metadata.checkpoint_manager.best_checkpoint_results: the checkpoints Tune keeps
    for a trial (`checkpoint.keep`), each with the whole result row that carried it; they fill
    rows a lagging storage copy lacks (hpo.driver.guards.history);
  - the snapshot's checkpoint hooks (hpo.driver.guards.snapshot_deletes), replaced for a
    block: ray.train._internal.checkpoint_manager._delete_fs_path(fs, fs_path), which
    _CheckpointManager.register_checkpoint calls for each checkpoint it drops;
    _ExperimentCheckpointManager.on_trial_checkpoint(self, trial), which forces a snapshot
    every `num_to_keep` checkpoints of a trial, and ._update_auto_checkpoint_time(self,
    time_taken), which sets ._checkpoint_period to max(10 s, 19 x the last snapshot's time)
    when ._auto_checkpoint_enabled; _FilesystemSyncer._sync_up_command(self,
    local_path, uri, exclude) -> (upload, its kwargs), the copy of the driver's staging folder
    (the snapshot) into the experiment folder, the only sync the driver starts, built by
    _BackgroundSyncer.sync_up only when no copy still runs (else it skips the copy);
  - Trial.storage (ray.train._internal.storage.StorageContext): .trial_dir_name (None before
    the trial's start), .trial_driver_staging_path,
    where Tune's loggers write a trial's files on the driver, .storage_filesystem and
    .trial_fs_path, that folder in the experiment folder (an ended trial's copy,
    hpo.driver.guards.snapshot_deletes.copy_ended_trial);
  - OVERRIDDEN_HOOKS: Ray's private methods that hpo's subclasses override (an override
    cannot move here; what it relies on is listed here and checked):
      LoggerCallback._restore_from_remote(self, file_name, trial): Ray's file loggers bring a
      trial's file back from storage before they open it for appending
      (hpo.driver.plugins.trial_logs keeps the driver's newer copy);
      OptunaSearch._setup_study(self, mode): builds the Optuna study once Tune has given the
      search its space (hpo.driver.plugins.warm_start adds the earlier trials to it).
  - INHERITED_STATE: Ray's private attributes and helpers that those subclasses use (each
    must still be set or defined by Ray's class):
      MLflowLoggerCallback._trial_runs (trial -> MLflow run id; tracking reopens a resumed
      trial's run), CSVLoggerCallback._trial_files and ._setup_trial (trial_logs opens a
      trial's CSV once), JsonLoggerCallback._trial_files (trial -> its open result.json;
      trial_logs writes each row in one call), TBXLoggerCallback._summary_writer_cls
      (trial_logs purges the steps a restart repeats), OptunaSearch._ot_study and ._space
      (warm_start adds earlier trials), AsyncHyperBandScheduler._max_t (RASDA's last
      milestone).
Ray is imported only when one of these is called.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from hpo.ray_adapters.reading import (
    assigns,
    class_text,
    method_params,
    ray_class,
    replaced,
    sets_or_defines,
    source,
    source_of,
)

# What a handler of actor errors is given: the trial, the RayActorError, and Tune's own
# handling (count it), to call for a death it does not forgive.
ActorErrorHandler = Callable[[Any, BaseException, Callable[[Any, BaseException], None]], None]


class Hook(NamedTuple):
    """A private method of a Ray class that an hpo subclass overrides."""

    cls: str  # where Ray defines it: module.Class
    name: str
    params: tuple[str, ...]  # as Ray's method takes them, self first


OVERRIDDEN_HOOKS = (
    Hook("ray.tune.logger.logger.LoggerCallback", "_restore_from_remote",
         ("self", "file_name", "trial")),
    Hook("ray.tune.search.optuna.optuna_search.OptunaSearch", "_setup_study", ("self", "mode")),
)


INHERITED_STATE = (  # (where Ray defines it: module.Class, the attribute)
    ("ray.air.integrations.mlflow.MLflowLoggerCallback", "_trial_runs"),
    ("ray.tune.logger.csv.CSVLoggerCallback", "_trial_files"),
    ("ray.tune.logger.csv.CSVLoggerCallback", "_setup_trial"),
    ("ray.tune.logger.json.JsonLoggerCallback", "_trial_files"),
    ("ray.tune.logger.tensorboardx.TBXLoggerCallback", "_summary_writer_cls"),
    ("ray.tune.search.optuna.optuna_search.OptunaSearch", "_ot_study"),
    ("ray.tune.search.optuna.optuna_search.OptunaSearch", "_space"),
    ("ray.tune.schedulers.async_hyperband.AsyncHyperBandScheduler", "_max_t"),
)


def _inherits(path: str, name: str) -> bool:
    """sets_or_defines for a Ray class by its path, read from its file first: an integration's
    module (MLflow's imports mlflow, 0.8 s) is imported only where its own text lacks it."""
    module, _, qualname = path.rpartition(".")
    text = class_text(module, qualname)
    return bool(text) and (assigns(text, name) or re.search(rf"\bdef {name}\(", text)
                           is not None) or sets_or_defines(ray_class(path), name)


def hook_class(hook: Hook) -> type:
    """The Ray class that defines the hook."""
    return ray_class(hook.cls)


@contextlib.contextmanager
def actor_errors_handled_by(handler: ActorErrorHandler) -> Iterator[None]:
    """While the block runs, Tune hands each trial actor's death to handler(trial, exc,
    counted) instead of counting it; Tune's own handling is restored after."""
    from ray.tune.experiment.trial import Trial

    def handled(counted: Any) -> Any:
        return lambda trial, exc: handler(trial, exc, counted)

    with replaced(Trial, "_handle_ray_actor_error", handled):
        yield


@contextlib.contextmanager
def snapshot_hooks(mark: Callable[[Any, str], None],
                   wrap_upload: Callable[[Callable[..., Any]], Callable[..., Any]],
                   floor_s: float, checkpoint_floor_s: float,
                   copy_s: Callable[[], float]) -> Iterator[None]:
    """While the block runs, a checkpoint Tune drops is given to mark(fs, fs_path) instead of
    being deleted, each copy of the snapshot into the experiment folder runs as
    wrap_upload(the copy), and Tune's automatic snapshot period is 19 x (the last snapshot's
    time + copy_s(), the last copy's), at least floor_s, or at least checkpoint_floor_s once
    a trial has saved a checkpoint since the last snapshot copied into the folder (a
    checkpoint forces none); restored after."""
    from ray.train._internal import checkpoint_manager
    from ray.train._internal.storage import _FilesystemSyncer
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    share_s = [0.0]  # 19 x the last snapshot's and copy's time: Tune's 5% of the run
    # A checkpoint saved since the last snapshot that reached the folder: Tune skips a
    # snapshot's copy while the last one still runs, and then the next must come soon.
    saved = [False]

    def wrapped_command(original: Any) -> Any:
        def command(self: Any, *args: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
            upload, upload_kwargs = original(self, *args, **kwargs)
            saved[0] = False  # this copy carries the snapshot just written
            return wrap_upload(upload), upload_kwargs
        return command

    def floor() -> float:
        return checkpoint_floor_s if saved[0] else floor_s

    def period(self: Any, time_taken: float) -> None:
        if self._auto_checkpoint_enabled:
            share_s[0] = (time_taken + copy_s()) * 19
            self._checkpoint_period = max(floor(), share_s[0])

    def after_checkpoint(self: Any, trial: Any) -> None:
        saved[0] = True
        if self._auto_checkpoint_enabled:
            self._checkpoint_period = min(self._checkpoint_period,
                                          max(checkpoint_floor_s, share_s[0]))

    with replaced(checkpoint_manager, "_delete_fs_path", lambda _original: mark), \
            replaced(_ExperimentCheckpointManager, "on_trial_checkpoint",
                     lambda _original: after_checkpoint), \
            replaced(_ExperimentCheckpointManager, "_update_auto_checkpoint_time",
                     lambda _original: period), \
            replaced(_FilesystemSyncer, "_sync_up_command", wrapped_command):
        yield


def trial_folders(trial: Any) -> tuple[str, Any, str] | None:
    """A trial's folder on the driver, where Tune's loggers write it (its staging folder),
    and the storage's file system and path of its folder in the experiment folder; None for a
    trial that has no folder yet (never started)."""
    storage = trial.storage
    if storage.trial_dir_name is None:
        return None
    return (storage.trial_driver_staging_path, storage.storage_filesystem,
            storage.trial_fs_path)


def delete_fs_path(fs: Any, fs_path: str) -> None:
    """Ray's own deletion of a checkpoint folder (what Tune's checkpoint manager calls)."""
    from ray.train._internal.storage import _delete_fs_path

    _delete_fs_path(fs=fs, fs_path=fs_path)


def kept_checkpoint_rows(trial: Any) -> list[dict[str, Any]]:
    """The result rows that carried the checkpoints Tune keeps for a trial, oldest first."""
    kept = trial.run_metadata.checkpoint_manager.best_checkpoint_results
    rows = [dict(result.metrics) for result in kept if result.metrics]
    return sorted(rows, key=lambda row: int(row.get("training_iteration", 0)))


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    return actor_error_gaps() + snapshot_gaps() + history_gaps()


def actor_error_gaps() -> list[str]:
    """Tune's handler of a trial actor's death (actor_errors_handled_by)."""
    from ray.tune.experiment.trial import Trial

    handle = getattr(Trial, "_handle_ray_actor_error", None)
    if not callable(handle) or list(inspect.signature(handle).parameters) != ["self", "exc"]:
        return ["Trial._handle_ray_actor_error(self, exc)"]
    return []


def history_gaps() -> list[str]:
    """What the history guards and the plugins' subclasses read: the checkpoints Tune keeps,
    a trial's folders, the hooks they override and the state they inherit."""
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.tune.experiment.trial import Trial

    gaps = []
    if not (sets_or_defines(Trial, "run_metadata")
            and isinstance(getattr(_CheckpointManager, "best_checkpoint_results", None),
                           property)):
        gaps.append("Trial.run_metadata.checkpoint_manager.best_checkpoint_results")
    gaps += _trial_folder_gaps()
    gaps += [f"{path}.{name}" for path, name in INHERITED_STATE if not _inherits(path, name)]
    return gaps + [gap for hook in OVERRIDDEN_HOOKS if (gap := _hook_gap(hook))]


def snapshot_gaps() -> list[str]:
    from ray.train._internal import checkpoint_manager, storage, syncer
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    sync_up = source(syncer._BackgroundSyncer.sync_up)
    skip, build = sync_up.find("_should_continue_existing_sync"), sync_up.find("._sync_up_command(")
    wanted = {
        "_CheckpointManager.register_checkpoint calls _delete_fs_path(fs=, fs_path=)":
            "_delete_fs_path(fs=" in source_of(checkpoint_manager._CheckpointManager)
            and callable(getattr(checkpoint_manager, "_delete_fs_path", None)),
        "_ExperimentCheckpointManager.on_trial_checkpoint(self, trial)":
            method_params(_ExperimentCheckpointManager, "on_trial_checkpoint") == ["self", "trial"],
        "_ExperimentCheckpointManager._update_auto_checkpoint_time(self, time_taken)":
            method_params(_ExperimentCheckpointManager, "_update_auto_checkpoint_time")
            == ["self", "time_taken"]
            and all(f"self.{name}" in source_of(_ExperimentCheckpointManager)
                    for name in ("_auto_checkpoint_enabled", "_checkpoint_period")),
        "_FilesystemSyncer._sync_up_command(self, local_path, uri, exclude)":
            method_params(storage._FilesystemSyncer, "_sync_up_command")
            == ["self", "local_path", "uri", "exclude"],
        "_BackgroundSyncer.sync_up builds the copy's command only past its skip":
            0 <= skip < build,
    }
    return [name for name, there in wanted.items() if not there]


def _trial_folder_gaps() -> list[str]:
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment.trial import Trial

    properties = ("trial_driver_staging_path", "trial_fs_path")
    there = sets_or_defines(Trial, "storage") and \
        sets_or_defines(StorageContext, "trial_dir_name") and \
        "self.storage_filesystem," in source_of(StorageContext) and all(
        isinstance(inspect.getattr_static(StorageContext, name, None), property)
        for name in properties)
    return [] if there else ["Trial.storage.{trial_dir_name, trial_driver_staging_path, "
                             "trial_fs_path, storage_filesystem}"]


def _hook_gap(hook: Hook) -> str | None:
    wanted = f"{hook.cls}.{hook.name}({', '.join(hook.params)})"
    try:
        method = inspect.getattr_static(hook_class(hook), hook.name, None)
    except (ImportError, AttributeError):
        return wanted
    if not inspect.isfunction(method) or tuple(inspect.signature(method).parameters) != hook.params:
        return wanted
    return None
