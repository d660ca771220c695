"""Ray's per-trial loggers (result.json, progress.csv, TensorBoard), fixed where they lose rows.

- result.json and progress.csv: when a trial restarts (a PBT exploit, a paused trial's turn, a
  retry), Ray copies the file back from storage over the driver's own copy. Storage lags the
  driver (it is synced in the background, and a sync may be half-written at that moment), so
  rows reported since the last sync were lost, and a PBT exploit at the last perturbation
  once left a trial's result.json empty. The driver's copy is the newest one, so it is kept;
  the storage copy is still brought back when the driver has none (`hpo resume`).
- TensorBoard: Ray's TBXLoggerCallback opens a new tensorboardX writer each time a trial
  (re)starts, and tensorboardX names its events file by the second and host only, opening it
  for writing: a trial restarted within the same second truncated its earlier file. Here every
  writer gets its own file; TensorBoard merges the files of a trial's folder by step. The
  events are written in the driver's thread and flushed on a timer (hpo.driver.plugins.tb_events).
- A write that fails because the experiment's file system is full (or over quota, or read-only)
  is noted as the run's storage fault (which stops the run, resumable) instead of raising out
  of Tune's loop, which skipped Tune's last experiment snapshot.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray.tune import Callback
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback
from ray.tune.utils.util import SafeFallbackEncoder  # as Ray's JSON logger

from hpo.driver.guards import history, storage_faults


def _noting_storage_faults(write: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return write(*args, **kwargs)
    except OSError as exc:
        watch = storage_faults.current()
        if watch is None or not watch.note(storage_faults.classify(exc)):
            raise
        return None


class _NotesStorageFaults:
    """For Ray's loggers: a full disk is the run's storage fault, not a crash of Tune's loop."""

    def log_trial_start(self, trial: Any) -> None:
        _noting_storage_faults(super().log_trial_start, trial)  # type: ignore[misc]  # a mixin

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        _noting_storage_faults(super().log_trial_result,  # type: ignore[misc]  # a mixin
                               iteration, trial, result)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        end = super().log_trial_end  # type: ignore[misc]  # a mixin
        _noting_storage_faults(end, trial, failed)


class _KeepsDriverCopy(_NotesStorageFaults):
    """For Ray's file loggers: bring the storage copy back only when the driver has none, and
    cut it back to the checkpoint the trial starts from (hpo.driver.guards.history). Ray calls this
    before it opens the file for appending."""

    # Ray's private hook: listed and checked in hpo.ray_adapters.tune_guards.OVERRIDDEN_HOOKS.
    def _restore_from_remote(self, file_name: str, trial: Any) -> None:
        if not Path(trial.local_path, file_name).exists():
            super()._restore_from_remote(file_name, trial)  # type: ignore[misc]  # a mixin
        history.cut_trial_file(Path(trial.local_path, file_name), trial)


class _RowInOneCall:
    """Ray's result.json row, encoded by json.dumps (in C) instead of json.dump (in Python,
    piece by piece): the same line, 11 us instead of 34-53 us here."""

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        if trial not in self._trial_files:  # type: ignore[attr-defined]  # JsonLoggerCallback's
            self.log_trial_start(trial)  # type: ignore[attr-defined]  # JsonLoggerCallback's
        file = self._trial_files[trial]  # type: ignore[attr-defined]  # JsonLoggerCallback's
        file.write(json.dumps(result, cls=SafeFallbackEncoder) + "\n")
        file.flush()


class JsonLogger(_KeepsDriverCopy, _RowInOneCall, JsonLoggerCallback):
    """Ray's result.json logger that never overwrites the driver's newer copy."""


class CsvLogger(_KeepsDriverCopy, CSVLoggerCallback):
    """Ray's progress.csv logger that never overwrites the driver's newer copy."""

    def log_trial_start(self, trial: Any) -> None:
        # Ray's CSV logger opens the file at the first result only, and keeps it open over a
        # pause or a reused actor: reopen (and so cut) at every start.
        if trial in self._trial_files:
            super().log_trial_end(trial)
        _noting_storage_faults(self._setup_trial, trial)


def _writer(logdir: str, **options: Any) -> Any:
    from hpo.driver.plugins.tb_events import TimedSummaryWriter

    return TimedSummaryWriter(logdir, filename_suffix=f".{uuid.uuid4().hex[:8]}", **options)


class TensorBoardLogger(_NotesStorageFaults, TBXLoggerCallback):
    """Ray's TensorBoard logger with one events file per writer (none overwritten); a
    restarted trial's writer purges the steps after its checkpoint (TensorBoard drops them)."""

    def __init__(self) -> None:
        super().__init__()  # raises ImportError without tensorboardX: no silent gap
        self._summary_writer_cls = _writer

    def log_trial_start(self, trial: Any) -> None:
        purge = history.restored_iteration(trial) + 1
        self._summary_writer_cls = functools.partial(_writer, purge_step=purge)
        try:
            super().log_trial_start(trial)
        finally:
            self._summary_writer_cls = _writer


class StorageReserve(Callback):
    """Grows the storage watch's reserve file with what Tune's last sync rewrites (its
    driver staging folder), every few seconds; stops Tune for a fault noted before it could."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s, self._due = every_s, 0.0

    def __getstate__(self) -> dict[str, Any]:  # a resumed run's clock starts anew
        return {"every_s": self.every_s, "_due": 0.0}

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        watch = storage_faults.current()
        if watch is None:
            return
        watch.stop_pending()
        if time.monotonic() >= self._due:
            self._due = time.monotonic() + self.every_s
            watch.grow_reserve(trials[0].local_experiment_path if trials else None)


def trial_loggers() -> list[Any]:
    """The three loggers (passed to Tune so that it adds none of its own) and the reserve."""
    return [JsonLogger(), CsvLogger(), TensorBoardLogger(), StorageReserve()]
