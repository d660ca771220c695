"""A trainable whose worker processes come up slowly, as on a busy node or with heavy imports:
every Ray worker process after the first that loads the trainable waits SLOW_START_S first.
hpo sends a trainable from a file by value, so the wait sits in what loading it unpickles
(MARKS), not in this module's import. Each worker marks in the folder HPO_TEST_WORKERS_SEEN
that it loaded the trainable (`loaded-PID`) and, per trial, that it ran one (`ran-PID`)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import hpo

SLOW_START_S = 4.0


class _Marks:
    """The folder of marks; loading it in a Ray worker marks the process and, in every worker
    after the first, waits SLOW_START_S."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __reduce__(self) -> tuple[Any, ...]:
        return _load_marks, (self.folder,)


def _load_marks(folder: str) -> _Marks:
    if folder and Path(sys.argv[0]).name == "default_worker.py":  # a Ray worker, not the driver
        (Path(folder) / f"loaded-{os.getpid()}").touch()
        try:
            os.close(os.open(Path(folder) / "first", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            time.sleep(SLOW_START_S)
    return _Marks(folder)


MARKS = _Marks(os.environ.get("HPO_TEST_WORKERS_SEEN", ""))


def quick(config: dict[str, Any]) -> None:
    """Two steps of 0.1 s: much shorter than a worker's start."""
    (Path(MARKS.folder) / f"ran-{os.getpid()}").touch()
    for step in (1, 2):
        time.sleep(0.1)
        hpo.report({"score": config["x"] * step})
