"""Trainables whose own OSError is theirs, not the experiment's
(tests/driver/test_storage_faults.py),
loaded by file path (`tests/support/fault_trainables.py:NAME`). The trial with x == 1 fails on every
attempt; the others report. Each attempt is counted in the folder `attempts`, so a test sees
Tune's retries."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import hpo


def _attempt(config: dict[str, Any]) -> None:
    with open(Path(config["attempts"]) / f"x{config['x']}", "a") as counts:
        counts.write("attempt\n")


def reads_denied_data(config: dict[str, Any]) -> None:
    """x == 1 is denied its data file. The tests run as root, which no permission bits stop,
    so the error is raised as `open` would raise it."""
    _attempt(config)
    if config["x"] == 1:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/data/x")
    hpo.report({"score": float(config["x"])})


def fills_scratch(config: dict[str, Any]) -> None:
    """x == 1 copies 4 MB into its node-local scratch folder `scratch`, a smaller tmpfs: a
    real ENOSPC there, which names both files."""
    _attempt(config)
    if config["x"] == 1:
        source = Path(tempfile.mkdtemp(prefix="hpo-fault-"), "data.bin")  # not synced
        try:
            source.write_bytes(os.urandom(4 << 20))
            shutil.copyfile(source, Path(config["scratch"], f"data-{os.getpid()}.bin"))
        finally:
            shutil.rmtree(source.parent)
    hpo.report({"score": float(config["x"])})
