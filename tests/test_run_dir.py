"""hpo's private /tmp folder of an embedded run (hpo/run_dir.py): 0700, named after its
owner, removed afterwards; a later run removes the folders of runs that were killed, and
only those. The owners are real processes."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import psutil

from hpo.run_dir import OWNER_FILE, private_run_dir, remove_stale


def _folder(parent: Path, name: str, owner: str | None) -> Path:
    folder = parent / name
    (folder / "r" / "session_x" / "logs").mkdir(parents=True)
    (folder / "r" / "session_x" / "logs" / "raylet.out").write_text("log")
    if owner is not None:
        (folder / OWNER_FILE).write_text(owner)
    return folder


def _ended_process() -> str:
    """The owner line of a process that has exited."""
    proc = subprocess.Popen(["sleep", "60"])
    line = f"{proc.pid} {psutil.Process(proc.pid).create_time()!r}"
    proc.kill()
    proc.wait()
    return line


def test_only_folders_of_ended_runs_are_removed(tmp_path: Path) -> None:
    me = psutil.Process()
    killed = _folder(tmp_path, "hpo-killed", _ended_process())
    reused = _folder(tmp_path, "hpo-reused", f"{me.pid} {me.create_time() - 100!r}")
    alive = _folder(tmp_path, "hpo-alive", f"{me.pid} {me.create_time()!r}")
    starting = _folder(tmp_path, "hpo-starting", None)  # owner file not written yet
    garbled = _folder(tmp_path, "hpo-garbled", "12")
    other_user = _folder(tmp_path, "hpo-other", _ended_process())
    os.chown(other_user, 65534, 65534)
    not_hpo = _folder(tmp_path, "ray-killed", _ended_process())

    removed = remove_stale(tmp_path)

    assert sorted(removed) == sorted([killed, reused])
    assert not killed.exists() and not reused.exists()
    for kept in (alive, starting, garbled, other_user, not_hpo):
        assert (kept / "r" / "session_x" / "logs" / "raylet.out").exists(), kept


def test_private_run_dir_is_owned_private_and_removed(tmp_path: Path) -> None:
    stale = _folder(tmp_path, "hpo-stale", _ended_process())
    with private_run_dir(tmp_path) as run_dir:
        assert not stale.exists()
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
        pid, started = (run_dir / OWNER_FILE).read_text().split()
        assert int(pid) == os.getpid()
        assert float(started) == psutil.Process().create_time()
        assert remove_stale(tmp_path) == []  # its own run is alive
    assert not run_dir.exists()
