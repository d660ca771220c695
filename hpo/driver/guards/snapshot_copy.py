"""The snapshot's copy into a local experiment folder copies only the files that changed, each
whole, and the snapshot last.

Tune writes the experiment snapshot and every trial's result files in the driver's staging
folder, and copies that whole folder into the experiment folder at each snapshot: with
thousands of trials, tens of thousands of files each time, most of them trials long ended.
Here a file is copied again only when it changed since this run last copied it
(its size or mtime differ from what they were when that copy began: a file written during a
copy is copied again next time), or when the folder's copy is missing or not as long as it;
the few state files at the top (the snapshot, the searcher's and callbacks' states, rewritten
in place at every snapshot, maybe within one mtime tick) are copied every time.

The folder is a resume's truth at every instant, a SIGKILL of the driver included:
- each file is written beside its copy and renamed over it, so a copy cut short by a kill or a
  full disk leaves the folder's file as it was, never a prefix of it (Tune's copy writes in
  place: a killed copy left a trial's result.json short of rows its checkpoint had);
- the state files at the top are read first, before the trials' folders are listed (Tune
  has just written them; it may write them again, in place, while a slow copy runs: a state
  file that changed while it was read is read again), and renamed into the folder last,
  after every trial's files, the experiment state first as Tune writes it: the snapshot the
  folder names never runs ahead of the rows the folder holds (the rows reach the staging
  folder before the snapshot that counts them);
- hidden files are temporaries being written (Tune's atomic saves, hpo's history cuts) and
  are not copied.
A file system other than the local one, or a copy that excludes files, goes through Tune's
own copy. An ended trial's folder that the folder's snapshot names is copied the same way as
the trial ends, between the snapshot's copies (copy_tree; hpo.driver.plugins.ended_copy): its
rows then run ahead of the folder's snapshot, as a running trial's do, and a resume cuts them
back to the trial's checkpoint.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import json
import os
import shutil
from collections.abc import Callable
from typing import Any, NamedTuple

from pyarrow.fs import LocalFileSystem  # Tune's storage has imported it already

_SETTLE_TRIES = 3
# source path -> (size, mtime_ns) as they were when the file's last copy began
Copied = dict[str, tuple[int, int]]


def copy_changed(upload: Callable[..., Any], copied: Copied, local_path: str, fs: Any,
                 fs_path: str, exclude: Any = None) -> None:
    """Tune's `upload(local_path=, fs=, fs_path=, exclude=)`, copying only what changed."""
    if exclude or not local(fs) or not os.path.isdir(local_path):
        upload(local_path=local_path, fs=fs, fs_path=fs_path, exclude=exclude)
        return
    os.makedirs(fs_path, exist_ok=True)
    states: list[_Beside] = []
    try:
        for name in _state_names(local_path):  # before the trials' folders are listed
            beside = _copy_beside(local_path, fs_path, name, settled=True)
            if beside is not None:
                states.append(beside)
        copy_tree(copied, local_path, fs_path, below_only=True)
        for beside in states:
            _rename_over(copied, beside)
    finally:
        for beside in states:  # left by a failed copy
            _unlink(beside.partial)


def named_trials(fs_path: str) -> frozenset[str]:
    """The trial folders that the experiment folder's snapshot names (its newest
    experiment_state-*.json); none where it has none, or one that does not read whole."""
    states = sorted(glob.glob(os.path.join(glob.escape(fs_path), "experiment_state-*.json")))
    try:
        with open(states[-1]) as file:
            trials = json.load(file)["trial_data"]
        return frozenset(json.loads(pair[0])["relative_logdir"] for pair in trials)
    except (IndexError, OSError, ValueError, KeyError, TypeError):
        return frozenset()


def local(fs: Any) -> bool:
    """Whether a pyarrow file system is the local one (copied here, else by Tune)."""
    return isinstance(fs, LocalFileSystem)


def copy_tree(copied: Copied, local_path: str, fs_path: str, below_only: bool = False) -> None:
    """The files under local_path (those in its subfolders only, with below_only) that
    changed since this run copied them, each copied beside its copy in fs_path and renamed
    over it."""
    walk = os.walk(local_path)
    for folder, _, names in itertools.islice(walk, 1, None) if below_only else walk:
        into = fs_path if folder == local_path else \
            os.path.join(fs_path, os.path.relpath(folder, local_path))
        changed = [name for name in names
                   if not _temporary(name) and _changed(copied, folder, into, name)]
        if changed:
            os.makedirs(into, exist_ok=True)
        for beside in filter(None, (_copy_beside(folder, into, name) for name in changed)):
            _rename_over(copied, beside)


def _state_names(folder: str) -> list[str]:
    """The files at the top, the experiment state first (the order Tune writes them in)."""
    names = [entry.name for entry in os.scandir(folder)
             if entry.is_file() and not _temporary(entry.name)]
    return sorted(names, key=lambda name: (not name.startswith("experiment_state"), name))


def _temporary(name: str) -> bool:
    """A file being written, to be renamed: Tune's atomic saves (.UUID-tmp-NAME), hpo's
    history cuts (.NAME.cut, .NAME.fill) and copies (.NAME.hpo-copy) are all hidden."""
    return name.startswith(".")


class _Beside(NamedTuple):
    source: str
    stamp: tuple[int, int]  # the source's, as its copy began
    partial: str  # the copy, beside the folder's file
    target: str


def _changed(copied: Copied, folder: str, into: str, name: str) -> bool:
    stamp = _stamp(os.path.join(folder, name))
    return stamp is not None and not (copied.get(os.path.join(folder, name)) == stamp
                                      and _size(os.path.join(into, name)) == stamp[0])


def _copy_beside(folder: str, into: str, name: str, settled: bool = False) -> _Beside | None:
    """The file copied beside the folder's one; None when it is gone since the walk (a
    temporary file of Tune's atomic saves, renamed since). `settled`: copied again while it
    changed during the copy (Tune rewrites its state files in place, maybe during a slow
    copy)."""
    source, target = os.path.join(folder, name), os.path.join(into, name)
    partial = os.path.join(into, f".{name}.hpo-copy")
    for _ in range(_SETTLE_TRIES if settled else 1):
        stamp = _stamp(source)
        if stamp is None:
            return None
        try:
            shutil.copyfile(source, partial)
        except BaseException as exc:
            _unlink(partial)  # a full disk: give its room back
            if isinstance(exc, FileNotFoundError) and not os.path.exists(source):
                return None
            raise
        if _stamp(source) == stamp:
            break
    assert stamp is not None  # each try ends at `return None` or with the copy's stamp
    return _Beside(source, stamp, partial, target)


def _rename_over(copied: Copied, beside: _Beside) -> None:
    try:
        os.replace(beside.partial, beside.target)
    except BaseException:
        _unlink(beside.partial)
        raise
    copied[beside.source] = beside.stamp


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        seen = os.stat(path)
    except FileNotFoundError:
        return None
    return seen.st_size, seen.st_mtime_ns


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return -1
