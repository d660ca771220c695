"""The private /tmp folder of one embedded run (Ray's temp dir and the token live in it), and
the clean-up of such folders whose run was killed.

A killed driver takes its Ray processes with it (Ray ties them to the driver's life) but
leaves its folder behind: a few MB of Ray's session logs a run, which pile up on a login node.
Each folder names its owner (pid and the process's start time, so a reused pid does not count
as alive); a later run removes the folders of its user whose owner is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

PREFIX = "hpo-"
OWNER_FILE = "owner"


def _started(pid: int) -> float:
    return psutil.Process(pid).create_time()


def _owner_alive(folder: Path) -> bool:
    """False only when the owner file is readable and its process is gone (or the pid was
    reused by a younger process); a folder still being set up, or not hpo's, counts as alive."""
    try:
        pid_text, started_text = (folder / OWNER_FILE).read_text().split()
        pid, started = int(pid_text), float(started_text)
    except (OSError, ValueError):
        return True
    try:
        return abs(_started(pid) - started) < 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # e.g. access denied: someone's process is there
        return True


def remove_stale(parent: Path) -> list[Path]:
    """Remove this user's run folders under parent whose run has ended; return them."""
    removed = []
    for folder in parent.glob(PREFIX + "*"):
        with contextlib.suppress(OSError):
            if folder.stat().st_uid != os.getuid() or _owner_alive(folder):
                continue
            shutil.rmtree(folder)
            removed.append(folder)
    return removed


@contextlib.contextmanager
def private_run_dir(parent: Path = Path("/tmp")) -> Iterator[Path]:
    """A fresh 0700 folder under parent (short: AF_UNIX socket paths are limited to 107
    bytes), owned by this process, removed afterwards; stale ones are cleared first."""
    remove_stale(parent)
    run_dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))  # mkdtemp: 0700
    try:
        owner = run_dir / (OWNER_FILE + ".new")
        owner.write_text(f"{os.getpid()} {_started(os.getpid())!r}")
        owner.rename(run_dir / OWNER_FILE)  # whole or absent for a concurrent sweep
        yield run_dir
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
