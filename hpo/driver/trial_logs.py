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
  writer gets its own file; TensorBoard merges the files of a trial's folder by step.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback


class _KeepsDriverCopy:
    """For Ray's file loggers: bring the storage copy back only when the driver has none."""

    def _restore_from_remote(self, file_name: str, trial: Any) -> None:
        if not Path(trial.local_path, file_name).exists():
            super()._restore_from_remote(file_name, trial)  # type: ignore[misc]


class JsonLogger(_KeepsDriverCopy, JsonLoggerCallback):
    """Ray's result.json logger that never overwrites the driver's newer copy."""


class CsvLogger(_KeepsDriverCopy, CSVLoggerCallback):
    """Ray's progress.csv logger that never overwrites the driver's newer copy."""


def _writer(logdir: str, **options: Any) -> Any:
    from tensorboardX import SummaryWriter

    return SummaryWriter(logdir, filename_suffix=f".{uuid.uuid4().hex[:8]}", **options)


class TensorBoardLogger(TBXLoggerCallback):
    """Ray's TensorBoard logger with one events file per writer (none overwritten)."""

    def __init__(self) -> None:
        super().__init__()  # raises ImportError without tensorboardX: no silent gap
        self._summary_writer_cls = _writer


def trial_loggers() -> list[Any]:
    """The three loggers, passed to Tune so that it adds none of its own."""
    return [JsonLogger(), CsvLogger(), TensorBoardLogger()]
