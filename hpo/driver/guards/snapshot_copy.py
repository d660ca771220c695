"""The snapshot's copy into a local experiment folder copies only the files that changed.

Tune writes the experiment snapshot and every trial's result files in the driver's staging
folder, and copies that whole folder into the experiment folder at each snapshot: with
thousands of trials, tens of thousands of files each time, most of them trials long ended
(issue 36). Here a file is copied again only when it changed since this run last copied it
(its size or mtime differ from what they were when that copy began: a file written during a
copy is copied again next time), or when the folder's copy is missing or not as long as it;
the few state files at the top (the snapshot, the searcher's and callbacks' states, rewritten
in place at every snapshot, maybe within one mtime tick) are copied every time.
Each file is written in place, as Tune's copy writes it (hpo.driver.guards.whole_state
rewrites a state file cut short by a full disk). A file system other than the local one, or a
copy that excludes files, goes through Tune's own copy.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

from pyarrow.fs import LocalFileSystem  # Tune's storage has imported it already

# source path -> (size, mtime_ns) as they were when the file's last copy began
Copied = dict[str, tuple[int, int]]


def copy_changed(upload: Callable[..., Any], copied: Copied, local_path: str, fs: Any,
                 fs_path: str, exclude: Any = None) -> None:
    """Tune's `upload(local_path=, fs=, fs_path=, exclude=)`, copying only what changed."""
    if exclude or not isinstance(fs, LocalFileSystem) or not os.path.isdir(local_path):
        upload(local_path=local_path, fs=fs, fs_path=fs_path, exclude=exclude)
        return
    for folder, _, names in os.walk(local_path):
        into = os.path.join(fs_path, os.path.relpath(folder, local_path))
        made = False
        for name in names:
            source, target = os.path.join(folder, name), os.path.join(into, name)
            stamp = _stamp(source)
            if stamp is None or (folder != local_path and copied.get(source) == stamp
                                 and _size(target) == stamp[0]):
                continue  # gone since the walk saw it, or a trial's file that did not change
            if not made:
                os.makedirs(into, exist_ok=True)
                made = True
            try:
                shutil.copyfile(source, target)
            except FileNotFoundError:
                if os.path.exists(source):  # the folder's side failed
                    raise
                continue  # a temporary file of Tune's atomic saves, renamed since
            copied[source] = stamp


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
