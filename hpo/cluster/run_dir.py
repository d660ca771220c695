"""The private temp folder of one embedded run (Ray's temp dir and the token live in it), and
the clean-up of such folders whose run was killed.

A killed driver takes its Ray processes with it (Ray ties them to the driver's life) but
leaves its folder behind: a few MB of Ray's session logs a run, which pile up on a login node.
The driver holds a lock on the folder's owner file while it runs; the kernel drops the lock
when the process ends, however it ends. A later run of the same user removes the folders
whose owner file it can lock. (A lock, not a pid: pids are reused, start times move with the
clock, and containers sharing /tmp see other pid namespaces.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hpo.cluster.temp_dir import temp_parent

PREFIX = "hpo-"
OWNER_FILE = "owner"
# The owner file's second word: a folder in a $TMPDIR that several nodes share, where a lock
# may be seen on its own node only, is swept only by a run on its node.
_HOST = socket.gethostname().encode()


def _owner_gone(folder: Path) -> bool:
    """True when the owner file exists, names this host (or none) and nobody holds its lock;
    a folder still being set up (no owner file yet), or not hpo's, counts as in use."""
    try:
        fd = os.open(folder / OWNER_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        named = os.read(fd, 4096).split()
        if len(named) > 1 and named[1] != _HOST:
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # locked: the run is alive
        return False
    finally:
        os.close(fd)  # also drops the lock this check may have taken
    return True


def _remove(folder: Path) -> None:
    """Everything but the owner file first, so a removal that fails part-way (a file still
    being written by a dying process) leaves a folder that the next sweep tries again."""
    for child in folder.iterdir():
        if child.name != OWNER_FILE:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    (folder / OWNER_FILE).unlink()
    folder.rmdir()


def remove_stale(parent: Path) -> list[Path]:
    """Remove this user's run folders under parent whose run has ended; return them."""
    removed = []
    for folder in parent.glob(PREFIX + "*"):
        with contextlib.suppress(OSError):
            if folder.lstat().st_uid == os.getuid() and _owner_gone(folder):
                _remove(folder)
                removed.append(folder)
    return removed


@contextlib.contextmanager
def private_run_dir(parent: Path | None = None) -> Iterator[Path]:
    """A fresh 0700 folder under parent (by default temp_parent(); short: AF_UNIX socket
    paths are limited to 107 bytes), locked by this process while it exists, removed
    afterwards; stale ones are cleared first."""
    parent = temp_parent() if parent is None else parent
    for swept in dict.fromkeys((parent, Path("/tmp"))):  # also those of runs without $TMPDIR
        remove_stale(swept)
    run_dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))  # mkdtemp: 0700
    owner = run_dir / (OWNER_FILE + ".new")
    fd = os.open(owner, os.O_WRONLY | os.O_CREAT, 0o600)  # not inherited by subprocesses
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"{os.getpid()} ".encode() + _HOST + b"\n")  # the lock is what counts
        owner.rename(run_dir / OWNER_FILE)  # appears locked to a concurrent sweep
        yield run_dir
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        os.close(fd)
