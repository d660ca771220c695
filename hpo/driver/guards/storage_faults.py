"""A full, over-quota, read-only or failing experiment file system: one line, a resumable folder.

A storage fault is a failed write of the experiment itself: the driver's own (Tune's experiment
snapshot and its sync into the folder, the loggers' result rows, hpo.log, the tracking store)
or Tune's own writes into the folder from a trial's process (a checkpoint upload, an artifact
sync). A trial's OSError anywhere else (its data, its node-local scratch) is that trial's
error: Tune retries it per `failure.max_failures` and the run reports it (exit 1).

The first fault that reaches the driver (an exception, or a Ray log record that carries one)
is noted here; the watch then
 1. frees a reserve file kept in the experiment folder, so that Tune's last sync (the
    experiment snapshot and every trial's result files that changed; without room it ends
    early and leaves the folder's older snapshot, whole, or with Tune's own in-place copy of
    a non-local file system, files cut short) is written whole,
 2. stops Tune the way Ctrl+C does (SIGUSR1 to this process: Tune saves its state and returns,
    running trials stay resumable from their last checkpoints instead of failing one by one),
and the run ends with a StorageError naming the path. The reserve grows with what that sync
rewrites. `check_resumable` refuses a folder whose state was left damaged.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hpo.driver.guards.whole_state import (
    STATE_FILES,
    STATE_RESERVE_FILE,
    is_whole,
    rewrite_whole,
    state_bytes,
)
from hpo.errors import ExperimentError, StorageError

RESERVE_FILE = "hpo.reserve"
_MIN_RESERVE = 256 << 10
_WHAT = {errno.ENOSPC: "no space left on the file system",
         errno.EDQUOT: "the disk quota is exceeded",
         errno.EROFS: "the file system is read-only",
         errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
         errno.EIO: "input/output error", errno.ESTALE: "stale file handle"}
_FIX = "free space or raise the quota (or make the folder writable)"
_CHECK = ("check the file system or its server (a stale handle: the folder was removed or "
          "replaced on the server)")
# Remote errors (a trial's checkpoint upload) reach the driver as text in a log record. Only
# a full disk or quota: "read-only" in some log line need not be about the experiment folder.
_TEXT = re.compile(r"\[Errno (28|122)\]|No space left on device|Disk quota exceeded")
_BY_TEXT = {"28": errno.ENOSPC, "122": errno.EDQUOT, "No space": errno.ENOSPC,
            "Disk quota": errno.EDQUOT}
_SQLITE_FULL = "database or disk is full"  # sqlite3's SQLITE_FULL (an MLflow store)
# A trial's error as the driver gets it: Ray's remote task name in the text, or Tune's line.
_REMOTE, _TRIAL_FAILED = "ray::", "Trial task failed"
# Tune's own writes into the folder from a trial's process, by their frames in the trial's
# traceback (Ray 2.60): pyarrow's errors there carry no path to tell them by.
_UPLOAD = re.compile(r'ray/train/_internal/(?:storage|syncer)\.py", line \d+, in '
                     r"(?:persist_|sync_up|wait)")


@dataclass(frozen=True)
class Fault:
    errno: int
    path: str


def _from_text(text: str) -> int | None:
    match = _TEXT.search(text)
    if not match:
        return None
    key = match.group(1) or next(k for k in _BY_TEXT if match.group(0).startswith(k))
    return _BY_TEXT[key]


def _errno_of(exc: BaseException) -> int | None:
    code = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and code in _WHAT:
        return code
    if isinstance(exc, sqlite3.OperationalError) and _SQLITE_FULL in str(exc):
        return errno.ENOSPC
    return _from_text(str(exc)) if isinstance(exc, (OSError, EOFError)) else None


def classify(exc: BaseException | None) -> Fault | None:
    """The storage fault in `exc` or its causes (a Ray task error: its remote cause)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        remote = getattr(exc, "cause", None)
        if isinstance(remote, BaseException):  # its own errno and filename are empty
            exc = remote
            continue
        code = _errno_of(exc)
        if code:  # a copy's or rename's destination is what was being written
            path = getattr(exc, "filename2", None) or getattr(exc, "filename", None)
            return Fault(code, str(path or ""))
        exc = exc.__cause__ or exc.__context__
    return None


def _text_fault(text: str) -> Fault | None:
    code = _from_text(text) if "rrno" in text or "left on" in text or "quota" in text else None
    return Fault(code, "") if code else None


class StorageWatch:
    """One run's watch over its experiment folder's file system."""

    def __init__(self, exp_dir: Path) -> None:
        self.exp_dir = exp_dir
        self.fault: Fault | None = None
        self.staging: Path | None = None  # Tune's driver staging folder, once seen
        self._stopped = False
        self._lock = threading.Lock()

    def note(self, fault: Fault | None, stop: bool = True) -> bool:
        """Record the first fault, free the reserve, stop Tune; True if `fault` is one."""
        if fault is None:
            return False
        with self._lock:
            first, self.fault = self.fault is None, self.fault or fault
        if first:
            self.release_reserve()
        if stop:
            self.stop_pending()
        return True

    def stop_pending(self) -> None:
        """Stop Tune once for the fault noted. A fault noted before Tune took its signals (Ray
        starting) is acted on at the next fault or Tune step, not dropped."""
        with self._lock:
            if self.fault is None or self._stopped or not _tune_listens():
                return
            self._stopped = True
        os.kill(os.getpid(), signal.SIGUSR1)

    def reported(self, record: logging.LogRecord) -> Fault | None:
        """The experiment's storage fault that a Ray log record reports, if any. A trial's
        error is the trial's own unless Tune's writes into this folder raised it."""
        exc = record.exc_info[1] if record.exc_info else None
        said = record.getMessage() if exc is None else f"{record.getMessage()}\n{exc}"
        fault = classify(exc) or _text_fault(said)
        if fault is None or not _from_a_trial(said, exc):
            return fault
        ours = bool(fault.path) and self.holds(fault.path)
        return fault if ours or _UPLOAD.search(said) else None

    def holds(self, path: str) -> bool:
        return Path(os.path.abspath(path)).is_relative_to(self.exp_dir)

    def grow_reserve(self, rewritten: str | None = None) -> None:
        """Keep room in the reserve file for twice what Tune's last sync may rewrite (plus 256
        KiB): it copies the driver's staging folder `rewritten` (the experiment snapshot and
        every trial's result files) over the folder's files, each beside its old copy first.
        Without it: the top-level snapshot files."""
        if self.fault is not None:
            return
        self.staging = Path(rewritten) if rewritten else self.staging
        try:
            size = _size(Path(rewritten), deep=True) if rewritten else _size(self.exp_dir)
            _allocate(self.exp_dir / RESERVE_FILE, _MIN_RESERVE + 2 * size)
            if self.staging is not None:  # room to write the state whole again at the end
                _allocate(self.exp_dir / STATE_RESERVE_FILE,
                          _MIN_RESERVE + 2 * state_bytes(self.staging))
        except OSError as exc:
            # A disk too small for the reserve is not yet a fault; EIO, ESTALE, EROFS are.
            if exc.errno in _WHAT and exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                self.note(Fault(exc.errno, str(exc.filename or self.exp_dir)))

    def release_reserve(self) -> None:
        with contextlib.suppress(OSError):
            (self.exp_dir / RESERVE_FILE).unlink()

    def settle_state(self) -> None:
        """After Tune's last sync of a fault's stop: the state files whole (whole_state)."""
        if self.fault is not None and self.staging is not None:
            rewrite_whole(self.staging, self.exp_dir)

    def error(self) -> StorageError:
        fault = self.fault or Fault(errno.ENOSPC, "")
        where = f"{fault.path}: " if fault.path else ""
        under = f" under {self.exp_dir}" if not fault.path or self.holds(fault.path) else ""
        return StorageError(
            f"{where}{_WHAT.get(fault.errno, os.strerror(fault.errno))} "
            f"({errno.errorcode.get(fault.errno, fault.errno)}){under}; the trials stopped at "
            f"their last checkpoints. Hint: {_hint(fault.errno)}, then "
            f"`hpo resume {self.exp_dir}` continues")


def _from_a_trial(said: str, exc: BaseException | None) -> bool:
    return (_REMOTE in said or said.startswith(_TRIAL_FAILED)
            or isinstance(getattr(exc, "cause", None), BaseException))  # a RayTaskError


def _hint(code: int) -> str:
    return _CHECK if code in (errno.EIO, errno.ESTALE) else _FIX


def _size(folder: Path, deep: bool = False) -> int:
    """Bytes in `folder`'s files (deep: its whole tree; else its top-level .json files). A
    file or folder removed meanwhile counts 0 (Tune replaces its files while it runs)."""
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0
    total = 0
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):
            if entry.is_dir(follow_symlinks=False):
                total += _size(Path(entry.path), deep) if deep else 0
            elif deep or entry.name.endswith(".json"):
                total += entry.stat(follow_symlinks=False).st_size
    return total


def _allocate(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)


_current: StorageWatch | None = None


def storage_error(exc: OSError) -> StorageError | None:
    """Outside a run (`hpo report` writing its page): the one line for a full disk."""
    fault = classify(exc)
    if fault is None:
        return None
    return StorageError(f"{fault.path or 'a file'}: {_WHAT[fault.errno]} "
                        f"({errno.errorcode[fault.errno]}). Hint: {_hint(fault.errno)}, then "
                        "run it again")


def current() -> StorageWatch | None:
    """The watch of the run in progress in this process, if any."""
    return _current


def absorbed(exc: BaseException, path: str = "") -> bool:
    """For a driver-side write (a tracking store): note a storage fault in `exc` as the run's
    (stopping it cleanly) instead of letting it out of Tune's loop; `path` where it has none."""
    fault, watch = classify(exc), current()
    if fault is None or watch is None:
        return False
    return watch.note(Fault(fault.errno, fault.path or path))


def _tune_listens() -> bool:
    """Tune's own stop (as Ctrl+C or Slurm's USR1) is there: before, USR1 would end the
    process."""
    return callable(signal.getsignal(signal.SIGUSR1))


@contextlib.contextmanager
def storage_guard(exp_dir: Path) -> Iterator[StorageWatch]:
    """Watch a run's storage; a fault anywhere inside ends it with one StorageError."""
    global _current
    watch = _current = StorageWatch(exp_dir)
    try:
        yield watch
    except Exception as exc:
        if watch.note(classify(exc), stop=False) or watch.fault:
            raise watch.error() from exc
        raise
    finally:
        _current = None
        watch.release_reserve()
        with contextlib.suppress(OSError):
            (exp_dir / STATE_RESERVE_FILE).unlink()
    if watch.fault:
        raise watch.error()




def check_resumable(exp_dir: Path) -> None:
    """One line (exit 2) for a state file that `hpo resume` would read cut short or damaged
    (a full disk or a crash mid-write), naming it."""
    for pattern, kind in STATE_FILES:
        found = sorted(exp_dir.glob(pattern))
        if not found or is_whole(found[-1], kind):
            continue
        whole = [older for older in found[:-1] if is_whole(older, kind)]
        older = f", or move it away to continue from the older {whole[-1].name} (later steps " \
            "run again)" if whole else ""
        raise ExperimentError(f"{found[-1]}: cut short or damaged (a full disk or a crash "
                              f"while it was written); `hpo resume` cannot continue from it. "
                              f"Hint: restore it from a backup{older}")


