"""The experiment state left whole after a storage-fault stop. Tune's last sync of a local
folder (hpo.driver.guards.snapshot_copy) renames each file over its copy, so a full disk leaves
the folder's older state whole, and it matches the rows the folder holds. Tune's own copy (any
other file system) writes in place, so a disk that fills up again meanwhile (the freed reserve
taken by other writes) leaves a state file cut short, and `hpo resume` must refuse it (seen
once in three drills). After that sync, each state file that is missing or cut short is
written again beside it and renamed over it, into the room of a reserve kept for just this: a
write that still fails leaves the file as it was. A whole one is kept, even when older.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickletools
from collections import deque
from pathlib import Path

STATE_RESERVE_FILE = "hpo.state-reserve"
# What `hpo resume` has Tune read, the newest of each by name as Tune takes it: JSON, or
# (cloud)pickle whatever the name says. Tune restarts the experiment afresh, silently, when
# one cannot be read (storage_faults.check_resumable refuses it instead).
STATE_FILES = (("experiment_state-*.json", "json"), ("tuner.pkl", "pickle"),
               ("basic-variant-state-*.json", "pickle"), ("search_gen_state-*.json", "pickle"),
               ("searcher-state-*.pkl", "pickle"), ("callback-states-*.pkl", "pickle"))


def state_files(folder: Path) -> list[Path]:
    return sorted(path for pattern, _ in STATE_FILES for path in folder.glob(pattern))


def state_bytes(staging: Path) -> int:
    """What a rewrite of every state file needs (files removed meanwhile count 0)."""
    total = 0
    for path in state_files(staging):
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


def rewrite_whole(staging: Path, exp_dir: Path) -> list[str]:
    """Each state file of `staging` whose copy in `exp_dir` is missing or not whole, written
    again by write and rename; the names rewritten. The reserve is freed first: its room is
    for this."""
    with contextlib.suppress(OSError):
        (exp_dir / STATE_RESERVE_FILE).unlink()
    rewritten = []
    for pattern, kind in STATE_FILES:
        for source in sorted(staging.glob(pattern)):
            target = exp_dir / source.name
            with contextlib.suppress(OSError):  # unreadable or still full: left as it was
                if not target.exists() or not is_whole(target, kind):
                    _replace(target, source.read_bytes())
                    rewritten.append(source.name)
    return rewritten


def is_whole(path: Path, kind: str) -> bool:
    """Whether a state file reads whole: JSON, or (cloud)pickle by its name."""
    data = path.read_bytes()
    try:
        if kind == "json":
            json.loads(data)
        else:  # walks the opcodes without running them (no imports, no objects built)
            deque(pickletools.genops(data), maxlen=0)
    except ValueError:  # JSON's, UTF-8's and pickletools' errors are all ValueErrors
        return False
    return True


def _replace(target: Path, data: bytes) -> None:
    tmp = target.with_name(f".{target.name}.hpo-tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
