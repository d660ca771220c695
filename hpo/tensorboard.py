"""TensorBoard scalars per trial (`tensorboard --logdir EXPERIMENT_DIR`), via Ray's logger.

Ray's TBXLoggerCallback opens a new tensorboardX writer each time a trial (re)starts, and
tensorboardX names its events file by the second and host only, opening it for writing: a
trial restarted within the same second (PBT exploits, paused trials taking turns, reused
actors, `hpo resume`) truncated its earlier file and lost those scalars. Here every writer
gets its own file; TensorBoard merges the files of a trial's folder by step.
"""

from __future__ import annotations

import uuid
from typing import Any

from ray.tune.logger import TBXLoggerCallback


def _writer(logdir: str, **options: Any) -> Any:
    from tensorboardX import SummaryWriter

    return SummaryWriter(logdir, filename_suffix=f".{uuid.uuid4().hex[:8]}", **options)


class TensorBoardLogger(TBXLoggerCallback):
    """Ray's TensorBoard logger with one events file per writer (none overwritten)."""

    def __init__(self) -> None:
        super().__init__()  # raises ImportError without tensorboardX: no silent gap
        self._summary_writer_cls = _writer
