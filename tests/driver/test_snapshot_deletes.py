"""Dropped checkpoints are deleted only after a snapshot that no longer names them is in the
folder, and checkpoints force no snapshot (hpo.driver.guards.snapshot_deletes), on real Ray.

The instants are not left to timing: Tune snapshots every 0.2 s here, and the watch checks the
folder at every step of Tune's loop, while the snapshot's copy runs beside it.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from calls import ROOT, SUPPORT, trial_rows
from snapshot_watch import PERIOD_S, SPEC, SnapshotWatch, named_checkpoints

import hpo
from hpo.driver.guards import snapshot_copy
from hpo.driver.guards.snapshot_copy import copy_changed
from hpo.driver.guards.snapshot_deletes import _Dropped, _SnapshotCopy, copy_ended_trial

STEPS = SPEC["constants"]["steps"]


def _checkpoint_folders(exp_dir: Path) -> dict[str, list[str]]:
    return {trial.name: sorted(p.name for p in trial.glob("checkpoint_*"))
            for trial in sorted(exp_dir.iterdir()) if trial.is_dir()}


@pytest.mark.slow
def test_the_folders_snapshot_names_only_checkpoints_on_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", PERIOD_S)
    watch = SnapshotWatch(str(tmp_path / "w"))
    hpo.run({**SPEC, "name": "w"}, storage=str(tmp_path), callbacks=[watch], keep_ray=True)
    assert watch.missing == [], "named by the snapshot, not on disk"
    assert watch.rows_short == [], "named by the snapshot, its rows not in the folder"
    assert watch.dropped_named > 0  # the instants the test is about did come
    # every dropped checkpoint is gone by the end: the newest `keep` (1) stays
    last = f"checkpoint_{STEPS - 1:06d}"
    assert list(_checkpoint_folders(tmp_path / "w").values()) == [[last]] * SPEC["num_samples"]
    assert named_checkpoints(tmp_path / "w") == {
        str(path) for path in (tmp_path / "w").glob(f"*/{last}")}
    assert "snapshotting has been triggered multiple times" not in (
        tmp_path / "w" / "hpo.log").read_text()


@pytest.mark.slow
def test_a_driver_killed_when_its_snapshot_names_a_dropped_checkpoint_resumes_exactly(
        tmp_path: Path) -> None:
    """SIGKILL at the first step where the folder's snapshot names a checkpoint Tune has
    dropped: that checkpoint is still there, and `hpo resume` restarts from it."""
    # the watch is pickled with it
    env = {**os.environ, "PYTHONPATH": str(SUPPORT)}
    killed = subprocess.run([sys.executable, "tests/support/snapshot_watch.py", str(tmp_path), "k"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert (tmp_path / "k.killed").exists()
    named = named_checkpoints(tmp_path / "k")
    assert named and all(os.path.isdir(path) for path in named), named
    resumed = subprocess.run([sys.executable, "-m", "hpo", "resume", str(tmp_path / "k")],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rows = {name: [r["training_iteration"] for r in found]
            for name, found in trial_rows(tmp_path / "k").items()}
    assert list(rows.values()) == [list(range(1, STEPS + 1))] * SPEC["num_samples"], rows
    # The checkpoints dropped after that snapshot were written again by the steps run again,
    # and dropped and deleted as usual. Left behind can only be ones older than the snapshot
    # names, when the kill came between its copy's end and that copy's deletions.
    last = f"checkpoint_{STEPS - 1:06d}"
    named_at_kill = {Path(path).parent.name: Path(path).name for path in named}
    for trial, folders in _checkpoint_folders(tmp_path / "k").items():
        assert folders[-1] == last, folders
        assert all(folder < named_at_kill[trial] for folder in folders[:-1]), (
            trial, folders, named_at_kill)


def _upload(**kwargs: object) -> None:
    assert kwargs["fs"] == "remote"  # not the local file system: Tune's own copy


def _failing_upload(**kwargs: object) -> None:
    raise OSError(28, "No space left on device")


def test_deletions_wait_for_the_copy_and_a_failed_copy_hands_them_on(tmp_path: Path) -> None:
    from pyarrow.fs import LocalFileSystem

    fs = LocalFileSystem()
    folders = [tmp_path / f"checkpoint_{i:06d}" for i in range(3)]
    for folder in folders:
        folder.mkdir()
    where = {"local_path": "staging", "fs": "remote", "fs_path": "exp", "exclude": None}
    dropped = _Dropped()
    dropped.mark(fs, str(folders[0]))
    failing = dropped.deleting_after(_failing_upload)
    dropped.mark(fs, str(folders[1]))  # after the snapshot: not this copy's to delete
    with pytest.raises(OSError):
        failing(**where)
    assert all(folder.is_dir() for folder in folders)
    copy = dropped.deleting_after(_upload)  # the next snapshot's copy takes both
    assert dropped.take() == []
    copy(**where)
    assert [folder.is_dir() for folder in folders] == [False, False, True]
    copy(**where)  # the same copy once more: the folders it deletes are gone, no error
    # Tune pickles the command with its storage context: it pickles as the copy alone
    assert pickle.loads(pickle.dumps(copy)) is _upload
    assert isinstance(copy, _SnapshotCopy) and copy.__name__ == "_upload"


def _stamps(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")
            if p.is_file()}


def test_the_snapshot_copy_writes_only_what_changed(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from pyarrow.fs import LocalFileSystem

    staging, exp = tmp_path / "staging", tmp_path / "exp"
    for trial in ("a", "b"):
        (staging / trial).mkdir(parents=True)
        (staging / trial / "result.json").write_text(f"{trial}1\n")
    (staging / "experiment_state.json").write_text("{}")
    copied: dict = {}
    where = {"local_path": str(staging), "fs": LocalFileSystem(), "fs_path": str(exp)}
    copy_changed(_failing_upload, copied, **where)  # a local copy is hpo's own
    assert _stamps(exp).keys() == _stamps(staging).keys()
    first = _stamps(exp)
    copy_changed(_failing_upload, copied, **where)
    # the state files at the top are copied every time; the trials' files had no change
    assert {name for name, ns in _stamps(exp).items() if ns != first[name]} == {
        "experiment_state.json"}
    first = _stamps(exp)
    with (staging / "b" / "result.json").open("a") as file:
        file.write("b2\n")
    (exp / "a" / "result.json").write_text("")  # cut short in the folder (a full disk)
    # a temporary file of Tune's atomic saves, renamed between the walk and its copy
    (staging / "searcher.tmp").write_text("")
    real_copy = shutil.copyfile

    def renamed_first(source: str, target: str) -> object:
        if source.endswith(".tmp"):
            os.replace(source, staging / "searcher.pkl")
        return real_copy(source, target)

    monkeypatch.setattr(snapshot_copy.shutil, "copyfile", renamed_first)
    copy_changed(_failing_upload, copied, **where)
    changed = {name for name, ns in _stamps(exp).items() if ns != first[name]}
    assert changed == {"a/result.json", "b/result.json", "experiment_state.json"}
    assert not (exp / "searcher.tmp").exists()  # the next copy takes searcher.pkl
    assert [(exp / t / "result.json").read_text() for t in "ab"] == ["a1\n", "b1\nb2\n"]


def test_the_folders_snapshot_never_runs_ahead_of_its_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state files are read first and renamed into the folder last; every file is written
    whole: a copy cut short (a kill, a full disk) leaves the folder as it was."""
    from pyarrow.fs import LocalFileSystem

    staging, exp = tmp_path / "staging", tmp_path / "exp"
    (staging / "a").mkdir(parents=True)
    state, rows = staging / "experiment_state.json", staging / "a" / "result.json"
    state.write_text("s1")
    rows.write_text("r1\n")
    copied: dict = {}
    where = {"local_path": str(staging), "fs": LocalFileSystem(), "fs_path": str(exp)}
    copy_changed(_failing_upload, copied, **where)
    state.write_text("s2")
    rows.write_text("r1\nr2\n")
    real_copy = shutil.copyfile

    def full_disk_at_rows(source: str, target: str) -> object:
        if source == str(rows):
            Path(target).write_text("r")  # cut short
            raise OSError(28, "No space left on device")
        return real_copy(source, target)

    monkeypatch.setattr(snapshot_copy.shutil, "copyfile", full_disk_at_rows)
    with pytest.raises(OSError):
        copy_changed(_failing_upload, copied, **where)
    assert (exp / "experiment_state.json").read_text() == "s1"
    assert (exp / "a" / "result.json").read_text() == "r1\n"
    assert sorted(p.name for p in exp.rglob(".*")) == []  # no partial copy left
    seen: list[str] = []
    (staging / ".1f2e-tmp-searcher.pkl").write_text("half")  # temporaries being written
    (staging / "a" / ".result.json.cut").write_text("r1")

    def tune_writes_again(source: str, target: str) -> object:
        done = real_copy(source, target)
        if source == str(state) and state.read_text() == "s2":
            state.write_text("s3")  # Tune's next snapshot while this one was read: read again
        elif source == str(rows):
            seen.append((exp / "experiment_state.json").read_text())
            state.write_text("s4")  # and after it was read: not this copy's
        return done

    monkeypatch.setattr(snapshot_copy.shutil, "copyfile", tune_writes_again)
    copy_changed(_failing_upload, copied, **where)
    assert seen == ["s1"]  # the rows were copied while the folder still named the old state
    assert (exp / "experiment_state.json").read_text() == "s3"
    assert (exp / "a" / "result.json").read_text() == "r1\nr2\n"
    assert sorted(p.name for p in exp.rglob(".*")) == []  # nor temporaries


def test_snapshots_come_every_10_s_and_every_second_once_a_trial_has_saved() -> None:
    """On Tune's own checkpoint manager and syncer: without checkpoints, a snapshot records
    only which trials ended and costs the driver its share every 10 s, as in Tune; a saved
    checkpoint brings the next one within a second (its dropped ones are deleted after its
    copy), until a snapshot's copy has started: Tune skips the copy while the last one runs."""
    from pyarrow.fs import LocalFileSystem
    from ray.train._internal.storage import _FilesystemSyncer
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    from hpo.driver.guards import snapshot_deletes
    from hpo.ray_adapters import tune_guards

    manager = _ExperimentCheckpointManager(storage=None, checkpoint_period="auto")
    syncer = _FilesystemSyncer(LocalFileSystem())

    def snapshot(time_taken: float, copied: bool) -> None:  # what Tune does after save_fn
        if copied:
            syncer._sync_up_command(local_path="staging", uri="exp")
        manager._update_auto_checkpoint_time(time_taken)

    with tune_guards.snapshot_hooks(lambda fs, path: None, lambda upload: upload,
                                    snapshot_deletes.PERIOD_FLOOR_S,
                                    snapshot_deletes.CHECKPOINT_PERIOD_FLOOR_S, lambda: 0.01):
        snapshot(0.02, copied=True)
        assert manager._checkpoint_period == 10.0
        manager.on_trial_checkpoint(object())
        assert manager._checkpoint_period == 1.0
        snapshot(0.02, copied=False)  # the last copy still ran: this one was skipped
        assert manager._checkpoint_period == 1.0
        snapshot(0.02, copied=True)
        assert manager._checkpoint_period == 10.0
        snapshot(0.2, copied=True)  # a dear snapshot: 5% of the run
        manager.on_trial_checkpoint(object())
        assert manager._checkpoint_period == pytest.approx((0.2 + 0.01) * 19)
        assert not manager._should_force_sync_up
    fixed = _ExperimentCheckpointManager(storage=None, checkpoint_period=0.2)
    with tune_guards.snapshot_hooks(lambda fs, path: None, lambda upload: upload, 10.0, 1.0,
                                    lambda: 0.0):
        fixed.on_trial_checkpoint(object())  # TUNE_GLOBAL_CHECKPOINT_S is kept
        fixed._update_auto_checkpoint_time(0.02)
        assert fixed._checkpoint_period == 0.2
        assert not fixed._should_force_sync_up


def _snapshot_naming(staging: Path, *trials: str) -> None:
    data = [[json.dumps({"relative_logdir": trial}), "{}"] for trial in trials]
    (staging / "experiment_state-2026-11-29_12-00-00.json").write_text(
        json.dumps({"trial_data": data}))


def test_an_ended_trial_the_snapshot_names_is_copied_as_it_ends_and_kept_by_the_next(
        tmp_path: Path) -> None:
    from pyarrow.fs import LocalFileSystem

    staging, exp = tmp_path / "staging", tmp_path / "exp"
    for trial in ("a", "b", "c"):
        (staging / trial).mkdir(parents=True)
        (staging / trial / "result.json").write_text(f"{trial}1\n")
    _snapshot_naming(staging, "a", "b")
    copy_ended_trial(str(staging / "a"), LocalFileSystem(), str(exp / "a"))  # no fit runs
    assert not exp.exists()
    where = {"local_path": str(staging), "fs": LocalFileSystem(), "fs_path": str(exp)}
    dropped = _Dropped()
    dropped.deleting_after(_failing_upload)(**where)  # the folder's snapshot names a and b
    for trial in ("a", "b", "c"):
        with (staging / trial / "result.json").open("a") as file:
            file.write(f"{trial}2\n")  # the trials' last rows
    dropped.copy_early(str(staging / "a"), str(exp / "a"))
    dropped.copy_early(str(staging / "c"), str(exp / "c"))  # begun after that snapshot
    dropped.end_early()  # waits for the copies queued
    assert [(exp / t / "result.json").read_text() for t in "abc"] == ["a1\na2\n", "b1\n",
                                                                       "c1\n"]
    copied_early = (exp / "a" / "result.json").stat().st_ino
    _snapshot_naming(staging, "a", "b", "c")
    dropped.deleting_after(_failing_upload)(**where)
    # the snapshot's copy found a's file copied (the same file: each copy is a new one)
    assert (exp / "a" / "result.json").stat().st_ino == copied_early
    assert [(exp / t / "result.json").read_text() for t in "bc"] == ["b1\nb2\n", "c1\nc2\n"]
    assert dropped.named == {"a", "b", "c"}


@pytest.mark.slow
def test_a_trial_sees_an_ended_trials_rows_in_the_folder_before_the_next_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots 60 s apart: the second trial finds the first one's rows in the experiment
    folder within 5 s of starting (hpo.driver.plugins.ended_copy)."""
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "60")
    exp_dir = tmp_path / "early"
    hpo.run({"name": "early", "trainable": "tests/support/study_trainables.py:sees_ended_trials",
             "metric": "score", "mode": "max", "max_concurrent": 1,
             "search_space": {"x": {"grid": [0, 1]}},
             "constants": {"steps": 3, "wait_s": 5.0, "exp_dir": str(exp_dir)}},
            storage=str(tmp_path), keep_ray=True)
    last_rows = sorted((rows[-1] for rows in trial_rows(exp_dir).values()),
                       key=lambda row: row["config"]["x"])
    assert [(row["config"]["x"], row["seen"]) for row in last_rows] == [(0, True), (1, True)]
