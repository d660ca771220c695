"""The experiment state left whole after a storage-fault stop: Tune's last sync copies its
staging folder over the experiment folder's files in place, so a disk that fills up again
meanwhile (the freed reserve taken by other writes) leaves a state file cut short, and
`hpo resume` must refuse it (seen once in three drills). After that sync, each state file
that differs from the staging copy is written again beside it and renamed over it, into the
room of a reserve kept for just this: a write that still fails leaves the file as it was.
"""

from __future__ import annotations

import contextlib
import os
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
    """Each state file of `staging` whose copy in `exp_dir` differs, written again by write
    and rename; the names rewritten. The reserve is freed first: its room is for this."""
    with contextlib.suppress(OSError):
        (exp_dir / STATE_RESERVE_FILE).unlink()
    rewritten = []
    for source in state_files(staging):
        target = exp_dir / source.name
        with contextlib.suppress(OSError):  # unreadable or still full: left as it was
            data = source.read_bytes()
            if not target.exists() or target.read_bytes() != data:
                _replace(target, data)
                rewritten.append(source.name)
    return rewritten


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
