"""hpo's private /tmp folder of an embedded run (hpo/cluster/run_dir.py): 0700, locked by its run,
removed afterwards; a later run removes the folders of runs that were killed, and only those.
The owners are real processes holding real locks."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hpo.cluster.run_dir import OWNER_FILE, private_run_dir, remove_stale

HOLD_LOCK = ("import fcntl, sys, time; f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); "
             "print('locked', flush=True); time.sleep(600)")


def _folder(parent: Path, name: str, with_owner: bool = True, owner: str = "12345\n") -> Path:
    folder = parent / name
    (folder / "r" / "session_x" / "logs").mkdir(parents=True)
    (folder / "r" / "session_x" / "logs" / "raylet.out").write_text("log")
    if with_owner:
        (folder / OWNER_FILE).write_text(owner)
    return folder


def _lock_held_by_another_process(folder: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(folder / OWNER_FILE)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
    return proc


def test_only_folders_of_ended_runs_are_removed(tmp_path: Path) -> None:
    killed = _folder(tmp_path, "hpo-killed")  # its owner died: nobody holds the lock
    killed_here = _folder(tmp_path, "hpo-killed-here", owner=f"12345 {socket.gethostname()}\n")
    # another node's, in a $TMPDIR both share: its lock may not be seen from here
    elsewhere = _folder(tmp_path, "hpo-elsewhere", owner="12345 another-node\n")
    alive = _folder(tmp_path, "hpo-alive")
    starting = _folder(tmp_path, "hpo-starting", with_owner=False)
    not_hpo = _folder(tmp_path, "ray-killed")
    others = [_folder(tmp_path, "hpo-other-user")] if os.geteuid() == 0 else []
    for folder in others:
        os.chown(folder, 65534, 65534)
    owner = _lock_held_by_another_process(alive)
    try:
        removed = remove_stale(tmp_path)
        assert sorted(removed) == [killed, killed_here] and not killed.exists()
        for kept in (alive, starting, not_hpo, elsewhere, *others):
            assert (kept / "r" / "session_x" / "logs" / "raylet.out").exists(), kept
    finally:
        owner.kill()
        owner.wait()
    assert remove_stale(tmp_path) == [alive]  # its owner has ended since


def test_private_run_dir_is_locked_private_and_removed(tmp_path: Path) -> None:
    stale = _folder(tmp_path, "hpo-stale")
    with private_run_dir(tmp_path) as run_dir:
        assert not stale.exists()
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
        assert (run_dir / OWNER_FILE).read_text() == f"{os.getpid()} {socket.gethostname()}\n"
        assert remove_stale(tmp_path) == []  # its own run is alive
        with open(run_dir / OWNER_FILE) as other:  # another open file: the lock conflicts
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                raise AssertionError("the run's owner file is not locked")
            except BlockingIOError:
                pass
    assert not run_dir.exists()


def test_hpo_log_says_rays_advice_in_hpos_words() -> None:
    import logging

    from hpo.driver.backends.ray_log import InHposWords

    words = InHposWords()

    def said(message: str) -> str | None:
        record = logging.LogRecord("ray.tune", logging.WARNING, __file__, 1, message, (), None)
        return record.getMessage() if words.filter(record) else None

    snapshot = ("Experiment state snapshotting has been triggered multiple times in the last "
                "5.0 seconds and may become a bottleneck. ... TUNE_WARN_EXCESSIVE_EXPERIMENT_"
                "CHECKPOINT_SYNC_THRESHOLD_S ...")
    assert said(snapshot) == InHposWords.SNAPSHOTS and "Tune saves it" in InHposWords.SNAPSHOTS
    assert said(snapshot) is None  # once a run
    interrupted = ("Experiment has been interrupted, but the most recent state was saved.\n"
                   'Resume experiment with: Tuner.restore(path="/r/x", trainable=...)')
    assert said(interrupted) == ("Experiment has been interrupted, but the most recent state "
                                 "was saved.")
    assert said("Trial t1 completed.") == "Trial t1 completed."


def test_a_runs_log_takes_no_record_after_its_end(tmp_path: Path) -> None:
    """Each run of a process (the Python API) logs to its own hpo.log: an ended run's log
    takes none of the next run's records, and hpo's loggers pass theirs on as before."""
    import logging

    from hpo.driver.backends.ray_log import _RAY_LOGGERS, log_ray_to, stop_logging

    before = {name: logging.getLogger(name).propagate for name in _RAY_LOGGERS}
    first = log_ray_to(tmp_path / "a.log")
    logging.getLogger("hpo.cluster").warning("the first run's")
    stop_logging(first)
    second = log_ray_to(tmp_path / "b.log")
    logging.getLogger("hpo.cluster").warning("the second run's")
    stop_logging(second)
    assert "the first run's" in (tmp_path / "a.log").read_text()
    assert "the second run's" not in (tmp_path / "a.log").read_text()
    assert "the second run's" in (tmp_path / "b.log").read_text()
    assert {name: logging.getLogger(name).propagate for name in _RAY_LOGGERS} == before


def test_run_folders_go_under_a_short_tmpdir_else_tmp(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """$TMPDIR, as Ray and other tools use it, where Ray's socket paths under it fit in 107
    bytes; /tmp otherwise (too long, or not a folder)."""
    from hpo.cluster.temp_dir import TMPDIR_MAX, temp_parent

    short = Path(tempfile.mkdtemp(prefix="t", dir="/var/tmp" if Path("/var/tmp").is_dir()
                                  else "/tmp"))
    try:
        monkeypatch.setenv("TMPDIR", str(short))
        assert len(str(short)) <= TMPDIR_MAX and temp_parent() == short
        with private_run_dir() as run_dir:
            assert run_dir.parent == short
        monkeypatch.setenv("TMPDIR", str(short / ("x" * TMPDIR_MAX)))
        (short / ("x" * TMPDIR_MAX)).mkdir()
        assert temp_parent() == Path("/tmp")  # too long
        monkeypatch.setenv("TMPDIR", str(short / "gone"))
        assert temp_parent() == Path("/tmp")
        monkeypatch.setenv("TMPDIR", "tmp")  # relative
        assert temp_parent() == Path("/tmp")
        monkeypatch.delenv("TMPDIR")
        assert temp_parent() == Path("/tmp")
    finally:
        shutil.rmtree(short)
