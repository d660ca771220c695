"""A checkpoint Tune drops is deleted once a snapshot that no longer names it is in the folder.

Tune keeps a trial's newest `checkpoint.keep` checkpoints and deletes the older ones at once.
So that its experiment snapshot never names a deleted checkpoint, it then forces a whole
snapshot each time a trial has checkpointed `keep` times since the last one: every trial's
state written again, the driver's staging folder (every trial's files) copied into the
experiment folder, and Tune's loop waiting for that copy. With thousands of trials each such
snapshot grows with the trials, so the cost of a trial grew with the number before it (issue
36; Tune warns "snapshotting has been triggered multiple times" in hpo.log).

Here a dropped checkpoint is only marked. The deletions marked before a snapshot is written are
done once that snapshot's copy into the experiment folder has ended well; a failed copy hands
them on to the next. Snapshots come on Tune's automatic period (19 times what the last one and
its copy took, about 5% of the run, but at least PERIOD_FLOOR_S apart, as in Tune, or
CHECKPOINT_PERIOD_FLOOR_S once a trial has saved since the last snapshot) and at every stop,
which still writes its snapshot whole and waits for it. The copy writes only the files that
changed (hpo.driver.guards.snapshot_copy). So at every instant the folder's snapshot names
checkpoints that are on disk, and a resume after a crash starts each trial from the checkpoint
that snapshot names (the rows after it are cut and run again: hpo.driver.guards.history). A
checkpoint outlives its drop by at most one snapshot period; a driver killed outright leaves
the dropped checkpoints since the last snapshot behind.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from hpo.driver.guards import storage_faults
from hpo.driver.guards.snapshot_copy import Copied, copy_changed, copy_tree, local, named_trials
from hpo.ray_adapters import tune_guards

_log = logging.getLogger("hpo.history")
# Tune's snapshots are max(10 s, 19 x a snapshot's time) apart: 5% of the run, which here
# also counts the last copy's time (its file system calls on a shared file system). With the
# checkpoints' forced snapshots gone, a lower floor once a trial has saved keeps the
# snapshot's checkpoints about as fresh as before for a resume after a kill, and deletes
# the dropped ones within a second or so. Without checkpoints, a snapshot records which
# trials ended and carries the rows into the folder: Tune's 10 s (a 1 s floor cost the
# driver 3 of its 11 CPU-s in util8 of `python -m benchmarks overhead-peers`, 100 s of 160
# trials without checkpoints).
PERIOD_FLOOR_S = 10.0
CHECKPOINT_PERIOD_FLOOR_S = 1.0
END_WAIT_S = 10.0  # at a fit's end, for the ended trials' copies still queued (redundant then)


class _Dropped:
    """The checkpoints Tune dropped that are not deleted yet, as (file system, path), and
    what the run's snapshot copies wrote."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # marked in Tune's loop, deleted in the copy's thread
        self._paths: list[tuple[Any, str]] = []
        # One copy at a time: Tune starts the next one beside a copy that ran past its
        # sync_timeout, and that one must not delete what the late one's snapshot names.
        self.copying = threading.Lock()
        self.copied: Copied = {}  # what the snapshot's and the ended trials' copies wrote
        self.last_copy_s = 0.0
        # The trial folders that the folder's snapshot (the last one copied whole) names:
        # only those are copied as they end. The folder of a trial begun since would be one
        # that no snapshot names, left beside the trial's rerun by a resume after a kill.
        self.named: frozenset[str] = frozenset()
        self._ended: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        self._copier: threading.Thread | None = None

    def copy_early(self, folder: str, into: str) -> None:
        """Copy an ended trial's folder now, in a thread of its own, one copy at a time with
        the snapshot's: the snapshot's next copy then finds its files copied already."""
        if os.path.basename(folder) not in self.named:
            return  # the next snapshot's copy takes it, as before
        if self._copier is None:  # a daemon: a hung file system holds no exit
            self._copier = threading.Thread(target=self._copy_ended, name="hpo-copy",
                                            daemon=True)
            self._copier.start()
        self._ended.put((folder, into))

    def _copy_ended(self) -> None:
        while (job := self._ended.get()) is not None:
            with self.copying:
                watch = storage_faults.current()
                if watch is not None and watch.fault is not None:
                    continue  # the room left is the stop's snapshot's
                try:
                    copy_tree(self.copied, *job)
                except OSError as exc:  # the snapshot's copy meets it again, and says so
                    _log.debug("%s was not copied as its trial ended: %s", job[0], exc)
                except Exception:  # the snapshot's copy takes it
                    _log.warning("%s was not copied as its trial ended", job[0], exc_info=True)

    def end_early(self, wait_s: float = END_WAIT_S) -> None:
        """Let the ended trials' copies queued so far run, for wait_s at most."""
        if self._copier is not None:
            self._ended.put(None)
            self._copier.join(wait_s)

    def mark(self, fs: Any, fs_path: str) -> None:
        with self._lock:
            self._paths.append((fs, fs_path))

    def take(self) -> list[tuple[Any, str]]:
        with self._lock:
            taken, self._paths = self._paths, []
        return taken

    def give_back(self, paths: list[tuple[Any, str]]) -> None:
        with self._lock:
            self._paths[:0] = paths

    def deleting_after(self, upload: Callable[..., Any]) -> Callable[..., Any]:
        """The snapshot's copy, then the deletion of what was dropped before it was written
        (Tune writes the snapshot and starts its copy in one go, in its own loop)."""
        return _SnapshotCopy(upload, self.take(), self)


class _SnapshotCopy:
    """A copy of the snapshot (only the files that changed: hpo.driver.guards.snapshot_copy),
    then the deletions. Tune pickles the command with its storage context: this one pickles
    as Tune's copy alone (the deletions belong to this driver)."""

    def __init__(self, upload: Callable[..., Any], due: list[tuple[Any, str]],
                 dropped: _Dropped) -> None:
        self.upload, self.due, self.dropped = upload, due, dropped
        functools.update_wrapper(self, upload)  # Ray names a slow copy by its __name__

    def __call__(self, **kwargs: Any) -> None:
        with self.dropped.copying:
            started = time.monotonic()
            try:
                copy_changed(self.upload, self.dropped.copied, **kwargs)
            except BaseException:
                self.dropped.give_back(self.due)
                raise
            for fs, fs_path in self.due:
                _delete(fs, fs_path)
            self.dropped.last_copy_s = time.monotonic() - started
            if local(kwargs["fs"]) and not kwargs.get("exclude"):  # hpo's copy: ended
                self.dropped.named = named_trials(kwargs["fs_path"])  # trials copied early

    def __reduce__(self) -> tuple[Any, ...]:
        return _plain, (self.upload,)


def _plain(upload: Callable[..., Any]) -> Callable[..., Any]:
    return upload


def _delete(fs: Any, fs_path: str) -> None:
    try:  # Ray's deletion logs its own errors; a folder already gone raises
        tune_guards.delete_fs_path(fs, fs_path)
    except OSError as exc:  # the checkpoint stays on disk; the run goes on
        _log.warning("could not delete the dropped checkpoint %s: %s", fs_path, exc)


_current: _Dropped | None = None  # the running fit's


def copy_ended_trial(staging: str, fs: Any, fs_path: str) -> None:
    """Copy an ended trial's folder (its driver staging folder) into the experiment folder
    now, in the running fit's copy thread, where the folder's snapshot names the trial: at a
    run's end, the last snapshot's copy held the files of every trial that had ended since
    the one before (1.0-1.2 s at 640 trials on 2 cores). Where Tune's own copy runs
    (not a local folder), nothing."""
    dropped = _current
    if dropped is not None and local(fs):
        dropped.copy_early(staging, fs_path)


@contextlib.contextmanager
def deleted_after_snapshot() -> Iterator[None]:
    """While the block runs (Tune's fit), dropped checkpoints are deleted after the next
    snapshot's copy, checkpoints force no snapshot, and an ended trial's folder is copied
    as it ends (copy_ended_trial)."""
    global _current
    dropped = _current = _Dropped()
    try:
        with tune_guards.snapshot_hooks(dropped.mark, dropped.deleting_after, PERIOD_FLOOR_S,
                                        CHECKPOINT_PERIOD_FLOOR_S, lambda: dropped.last_copy_s):
            yield
    finally:
        _current = None
        dropped.end_early()
    left = [fs_path for _, fs_path in dropped.take()]
    if left:  # Tune's loop failed, or its last copy did: no snapshot names them
        _log.warning("%d checkpoint(s) Tune dropped are still on disk (the run ended before "
                     "a snapshot without them was copied): %s", len(left), ", ".join(left))
