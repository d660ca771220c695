"""A full, over-quota or read-only experiment file system: one line and a resumable folder.

Anywhere in a run a write can fail (a trial's checkpoint on its node, Tune's experiment
snapshot, a logger's result row, hpo.log itself). The first such failure that reaches the
driver (an exception, or a Ray log record that carries one) is noted here; the watch then
 1. frees a reserve file kept in the experiment folder, so that Tune's last experiment
    snapshot (rewritten in place: on a full disk it was left cut short) is written whole,
 2. stops Tune the way Ctrl+C does (SIGUSR1 to this process: Tune saves its state and returns,
    running trials stay resumable from their last checkpoints instead of failing one by one),
and the run ends with a StorageError naming the path. The reserve grows with the snapshot.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hpo.errors import StorageError

RESERVE_FILE = "hpo.reserve"
_MIN_RESERVE = 256 << 10
_WHAT = {errno.ENOSPC: "no space left on the file system",
         errno.EDQUOT: "the disk quota is exceeded",
         errno.EROFS: "the file system is read-only",
         errno.EACCES: "permission denied", errno.EPERM: "operation not permitted"}
# Remote errors (a trial's checkpoint upload) reach the driver as text in a log record. Only
# a full disk or quota: "read-only" in some log line need not be about the experiment folder.
_TEXT = re.compile(r"\[Errno (28|122)\]|No space left on device|Disk quota exceeded")
_BY_TEXT = {"28": errno.ENOSPC, "122": errno.EDQUOT, "No space": errno.ENOSPC,
            "Disk quota": errno.EDQUOT}


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


def classify(exc: BaseException | None) -> Fault | None:
    """The storage fault in `exc`, its causes or (for Ray's remote errors) its text."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        code = getattr(exc, "errno", None)
        if isinstance(exc, OSError) and code in _WHAT:
            return Fault(code, str(exc.filename or ""))
        found = _from_text(str(exc)) if isinstance(exc, (OSError, EOFError)) else None
        if found:
            return Fault(found, str(getattr(exc, "filename", None) or ""))
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
    return None


class StorageWatch:
    """One run's watch over its experiment folder's file system."""

    def __init__(self, exp_dir: Path) -> None:
        self.exp_dir = exp_dir
        self.fault: Fault | None = None
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
                _stop_tune()
        return True

    def note_text(self, text: str) -> bool:
        code = _from_text(text) if "rrno" in text or "left on" in text else None
        return self.note(Fault(code, "") if code else None)

    def grow_reserve(self) -> None:
        """Keep room for twice Tune's snapshot files (plus 256 KiB) in the reserve file."""
        if self.fault is not None:
            return
        snapshot = sum(e.stat().st_size for e in os.scandir(self.exp_dir)
                       if e.name.endswith(".json") and e.is_file())
        # Best effort: a disk too small for the reserve is not yet a fault; the run goes on.
        with contextlib.suppress(OSError):
            fd = os.open(self.exp_dir / RESERVE_FILE, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, _MIN_RESERVE + 2 * snapshot)
            finally:
                os.close(fd)

    def release_reserve(self) -> None:
        with contextlib.suppress(OSError):
            (self.exp_dir / RESERVE_FILE).unlink()

    def error(self) -> StorageError:
        fault = self.fault or Fault(errno.ENOSPC, "")
        where = f"{fault.path}: " if fault.path else ""
        return StorageError(
            f"{where}{_WHAT.get(fault.errno, os.strerror(fault.errno))} "
            f"({errno.errorcode.get(fault.errno, fault.errno)}) under {self.exp_dir}; the "
            f"trials stopped at their last checkpoints. Hint: free space or raise the quota "
            f"(or make the folder writable), then `hpo resume {self.exp_dir}` continues")


_current: StorageWatch | None = None


def storage_error(exc: OSError) -> StorageError | None:
    """Outside a run (`hpo report` writing its page): the one line for a full disk."""
    fault = classify(exc)
    if fault is None:
        return None
    return StorageError(f"{fault.path or 'a file'}: {_WHAT[fault.errno]} "
                        f"({errno.errorcode[fault.errno]}). Hint: free space or raise the "
                        "quota (or make the folder writable), then run it again")


def current() -> StorageWatch | None:
    """The watch of the run in progress in this process, if any."""
    return _current


def _stop_tune() -> None:
    """Tune's own stop (as Ctrl+C or Slurm's USR1): only once its handler is installed, else
    USR1 would end the process."""
    if callable(signal.getsignal(signal.SIGUSR1)):
        os.kill(os.getpid(), signal.SIGUSR1)


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
    if watch.fault:
        raise watch.error()
