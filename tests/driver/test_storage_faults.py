"""A full, over-quota, read-only or failing experiment file system
(hpo/driver/guards/storage_faults.py): one line, exit code 4, Tune's snapshot left whole, and `hpo
resume` finishes with exact counts. A trial's own OSError (its data, its scratch) is that
trial's failure: retried, then exit 1 with a line naming the trial and its error."""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import pickle
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from calls import SUPPORT, hpo_cli

from hpo.driver.backends.ray_log import RunLog
from hpo.driver.guards import storage_faults
from hpo.driver.guards.storage_faults import Fault, StorageWatch, classify, storage_guard
from hpo.driver.plugins.trial_logs import StorageReserve
from hpo.errors import StorageError
from hpo.results import load_results

STEPS = 5
SPEC = f"""
name: full
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
num_samples: 60
search_space:
  x: {{uniform: [0.0, 1.0]}}
constants: {{steps: {STEPS}, sleep: 0.0}}
search: {{type: random, seed: 3}}
checkpoint: {{frequency: 1, keep: 1}}
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs: room for about a third of SPEC's trials and Tune's snapshot."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("drill", [1, 2, 3])  # once in three, the state was once left cut
def test_full_disk_one_line_then_resume_finishes_exactly(tmp_path: Path, small_disk: Path,
                                                         drill: int) -> None:
    space = tmp_path / "full.yaml"
    space.write_text(SPEC)
    exp_dir = small_disk / "full"
    done = hpo_cli("run", str(space), "--storage", str(small_disk), "--cpus", "2")
    assert done.returncode == 4, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Logging error" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: no space left on the file system (ENOSPC) under {exp_dir}; the "
                      "trials stopped at their last checkpoints. Hint: free space or raise the "
                      f"quota (or make the folder writable), then `hpo resume {exp_dir}` "
                      "continues"], done.stderr
    assert done.stderr.strip().splitlines()[-1] == errors[0], done.stderr
    # The live view's last frame (what the stop found: at most 8 running trials shown) + it.
    assert "stopped by a storage fault" in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) <= 5 + 1 + 8, done.stderr
    for state in exp_dir.glob("experiment_state-*.json"):
        json.loads(state.read_text())  # whole
    stopped = load_results(exp_dir)
    assert (stopped["status"] != "TERMINATED").any(), "the disk never filled up"

    subprocess.run(["mount", "-o", "remount,size=32m", str(small_disk)], check=True)
    done = hpo_cli("resume", str(exp_dir), "--cpus", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    frame = load_results(exp_dir)
    assert len(frame) == 60 and set(frame["status"]) == {"TERMINATED"}
    for trial in frame["path"]:  # every step once: none lost, none repeated
        rows = [json.loads(line) for line in Path(trial, "result.json").read_text().splitlines()]
        assert [r["training_iteration"] for r in rows] == list(range(1, STEPS + 1)), trial


class _QuotaStream(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(errno.EDQUOT, "Disk quota exceeded")


def test_over_quota_log_is_quiet_and_names_the_path(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    """EDQUOT injected into hpo.log's stream: no "--- Logging error ---", the fault noted."""
    handler = RunLog(tmp_path / "hpo.log")
    handler.stream = _QuotaStream()
    logger = logging.getLogger("hpo.test.quota")
    logger.addHandler(handler)
    try:
        with pytest.raises(StorageError) as caught, storage_guard(tmp_path):
            for _ in range(50):
                logger.error("a Ray log line", exc_info=ValueError("not a storage error"))
    finally:
        logger.removeHandler(handler)
    assert capsys.readouterr().err == ""
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'hpo.log'}: the disk quota is exceeded (EDQUOT) "
                              f"under {tmp_path}; the trials stopped"), message
    assert f"`hpo resume {tmp_path}` continues" in message and caught.value.exit_code == 4


def test_remote_fault_reported_in_a_log_record_is_noted(tmp_path: Path) -> None:
    """The experiment snapshot's sync (Ray's syncer, on the driver) says it only in text."""
    with pytest.raises(StorageError, match=r"^disk quota|the disk quota is exceeded"), \
            storage_guard(tmp_path) as watch:
        handler = RunLog(tmp_path / "hpo.log")
        record = logging.LogRecord("ray.train._internal.syncer", logging.ERROR, __file__, 1,
                                   "The latest sync operation failed with the following error: "
                                   "OSError('[Errno 122] Disk quota exceeded')", None, None)
        handler.emit(record)
        handler.close()
        assert watch.fault == Fault(errno.EDQUOT, "")


@pytest.mark.parametrize(("exc", "code"), [
    (OSError(errno.ENOSPC, "No space left on device", "/x/f"), errno.ENOSPC),
    (OSError(errno.EROFS, "Read-only file system", "/x/f"), errno.EROFS),
    (OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left"),
     errno.ENOSPC),
    (RuntimeError("wrapped"), None),
    (OSError(errno.ENOENT, "No such file or directory"), None),
])
def test_classify(exc: BaseException, code: int | None) -> None:
    found = classify(exc)
    assert (found.errno if found else None) == code
    wrapped = RuntimeError("outer")
    wrapped.__cause__ = exc
    assert classify(wrapped) == found


def test_reserve_is_freed_at_the_first_fault(tmp_path: Path) -> None:
    (tmp_path / "experiment_state-x.json").write_text("{}" * 1000)
    watch = StorageWatch(tmp_path)
    watch.grow_reserve()
    reserve = tmp_path / storage_faults.RESERVE_FILE
    assert reserve.stat().st_size >= 256 << 10
    watch.note(Fault(errno.ENOSPC, ""), stop=False)
    assert not reserve.exists()


def _trial_fault_run(tmp_path: Path, function: str,
                     **constants: Any) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """`hpo run` of two trials, x=1 failing with its own OSError, each retried once."""
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    space = tmp_path / f"{function}.yaml"
    space.write_text(yaml.safe_dump({
        "name": function, "trainable": f"{SUPPORT / 'fault_trainables.py'}:{function}",
        "metric": "score", "mode": "max", "search_space": {"x": {"grid": [1, 2]}},
        "constants": {"attempts": str(attempts), **constants},
        "failure": {"max_failures": 1}}))
    storage = tmp_path / "results"
    done = hpo_cli("run", str(space), "--storage", str(storage), "--cpus", "2", timeout=240)
    return done, storage / function, attempts


def _assert_the_trial_failed_alone(done: subprocess.CompletedProcess, exp_dir: Path,
                                   attempts: Path, cause: str) -> None:
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr
    frame = load_results(exp_dir)
    failed = frame.loc[frame["status"] == "ERROR", "trial_id"].tolist()
    assert len(failed) == 1 and set(frame["status"]) == {"ERROR", "TERMINATED"}, frame
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: 1 trial(s) failed after their retries ({failed[0]}). First: {cause} Hint: see "
        f"error.txt in the trial folders; `hpo resume {exp_dir}` retries them"), done.stderr
    # retried per failure.max_failures (1): two attempts, the run went on meanwhile
    assert (attempts / "x1").read_text().count("attempt") == 2
    assert (attempts / "x2").read_text().count("attempt") == 1


@pytest.mark.ray
@pytest.mark.slow
def test_trial_denied_its_data_fails_alone(tmp_path: Path) -> None:
    done, exp_dir, attempts = _trial_fault_run(tmp_path, "reads_denied_data")
    _assert_the_trial_failed_alone(done, exp_dir, attempts,
                                   "PermissionError: [Errno 13] Permission denied: '/data/x'")


@pytest.mark.ray
@pytest.mark.slow
def test_trial_filling_its_scratch_fails_alone(tmp_path: Path, small_disk: Path) -> None:
    """A real ENOSPC on the trial's own (full) tmpfs; the experiment folder is elsewhere."""
    done, exp_dir, attempts = _trial_fault_run(tmp_path, "fills_scratch", scratch=str(small_disk))
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    copied = re.search(r"OSError: \[Errno 28\] No space left on device: '[^']+' -> '([^']+)'",
                       last)
    assert copied and Path(copied[1]).parent == small_disk, done.stderr[-3000:]
    _assert_the_trial_failed_alone(done, exp_dir, attempts, copied[0])


def _task_error(cause: BaseException, frames: str = "") -> BaseException:
    """A trial's error as Tune gets it from Ray: a RayTaskError that is also the cause's
    class, its text the trial's traceback."""
    from ray.exceptions import RayTaskError

    trace = f"Traceback (most recent call last):\n{frames}{type(cause).__name__}: {cause}"
    return RayTaskError("train", trace, cause, proctitle="ray::ImplicitFunc.train", pid=1,
                        ip="127.0.0.1").as_instanceof_cause()


_UPLOAD_FRAMES = (
    '  File "/v/lib/python3.11/site-packages/ray/train/_internal/session.py", line 448, in '
    "report\n    persisted_checkpoint = self.storage.persist_current_checkpoint(checkpoint)\n"
    '  File "/v/lib/python3.11/site-packages/ray/train/_internal/storage.py", line 568, in '
    "persist_current_checkpoint\n    _pyarrow_fs_copy_files(\n")
_PYARROW_FULL = OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space "
                        "left on device")


_CONTROLLER, _FAILED = "ray.tune.execution.tune_controller", "Trial task failed for trial t_0"


@pytest.mark.parametrize(("name", "message", "exc", "fault"), [
    # a trial's own: its data, its scratch (with or without a path), anywhere but the folder
    pytest.param(
        _CONTROLLER, _FAILED,
        lambda exp: _task_error(PermissionError(errno.EACCES, "Permission denied", "/data/x")),
        None, id="trial-data-denied"),
    pytest.param(
        _CONTROLLER, _FAILED,
        lambda exp: _task_error(OSError(errno.ENOSPC, "No space left on device", "/scratch/o")),
        None, id="trial-scratch-full"),
    pytest.param(
        _CONTROLLER, _FAILED,
        lambda exp: _task_error(OSError(errno.ENOSPC, "No space left on device")), None,
        id="trial-full-no-path"),
    pytest.param(
        "ray._private.worker", "Unhandled error: ray::ImplicitFunc.train() ... OSError: "
        "[Errno 28] No space left on device", lambda exp: None, None, id="trial-text"),
    # Tune's checkpoint upload from the trial's process (pyarrow: no path), a trial's write
    # into the experiment folder, the driver's own snapshot sync (wherever its path)
    pytest.param(
        _CONTROLLER, _FAILED, lambda exp: _task_error(_PYARROW_FULL, _UPLOAD_FRAMES),
        lambda exp: Fault(errno.ENOSPC, ""), id="checkpoint-upload"),
    pytest.param(
        _CONTROLLER, _FAILED,
        lambda exp: _task_error(OSError(errno.EDQUOT, "Disk quota exceeded", f"{exp}/t/f")),
        lambda exp: Fault(errno.EDQUOT, f"{exp}/t/f"), id="trial-write-into-the-folder"),
    pytest.param(
        "ray.tune.execution.experiment_state", "Saving experiment state to storage failed",
        lambda exp: OSError(errno.ENOSPC, "No space left on device", "/elsewhere/x"),
        lambda exp: Fault(errno.ENOSPC, "/elsewhere/x"), id="driver-snapshot-sync"),
])
def test_a_record_is_a_storage_fault_by_its_origin(
        tmp_path: Path, name: str, message: str, exc: Callable[[Path], BaseException | None],
        fault: Callable[[Path], Fault] | None) -> None:
    error = exc(tmp_path)
    record = logging.LogRecord(name, logging.ERROR, __file__, 1, message, None,
                               (type(error), error, None) if error else None)
    assert StorageWatch(tmp_path).reported(record) == (fault and fault(tmp_path))


@pytest.fixture
def usr1_calls() -> Iterator[list[int]]:
    """SIGUSR1 ignored (as before Tune takes it); `listen()` puts a counting handler there."""
    before = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        yield []
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_a_fault_before_tune_listens_stops_it_once_it_does(tmp_path: Path,
                                                           usr1_calls: list[int]) -> None:
    """A fault noted while Ray starts (no handler yet) stops Tune at its first step; a
    later fault does not stop it twice."""
    with pytest.raises(StorageError), storage_guard(tmp_path) as watch:
        watch.note(Fault(errno.ENOSPC, str(tmp_path / "hpo.log")))
        signal.signal(signal.SIGUSR1, lambda signum, frame: usr1_calls.append(signum))
        StorageReserve().on_step_end(1, [])
        assert usr1_calls == [signal.SIGUSR1]
        watch.note(Fault(errno.EROFS, str(tmp_path / "result.json")))
    assert usr1_calls == [signal.SIGUSR1]


def test_a_second_fault_also_stops_tune(tmp_path: Path, usr1_calls: list[int]) -> None:
    with pytest.raises(StorageError, match="no space left"), storage_guard(tmp_path) as watch:
        watch.note(Fault(errno.ENOSPC, ""))  # before Tune listens
        signal.signal(signal.SIGUSR1, lambda signum, frame: usr1_calls.append(signum))
        watch.note(Fault(errno.EDQUOT, ""))
    assert usr1_calls == [signal.SIGUSR1]


class _Trial:
    def __init__(self, staging: Path) -> None:
        self.local_experiment_path = str(staging)


def test_reserve_covers_every_file_the_last_sync_rewrites(tmp_path: Path) -> None:
    """Tune's last sync copies its whole staging folder (the snapshot and every trial's
    result files) over the experiment folder's copies."""
    exp_dir, staging = tmp_path / "exp", tmp_path / "staging"
    exp_dir.mkdir()
    for trial in range(4):
        (staging / f"t{trial}").mkdir(parents=True)
        (staging / f"t{trial}" / "result.json").write_bytes(b"r" * (256 << 10))
    (staging / "experiment_state-x.json").write_text("{}")
    with storage_guard(exp_dir):
        StorageReserve().on_step_end(1, [_Trial(staging)])
        reserve = (exp_dir / storage_faults.RESERVE_FILE).stat().st_size
    assert reserve >= (256 << 10) + 2 * 4 * (256 << 10)


@pytest.mark.parametrize(("code", "what"), [(errno.ESTALE, "stale file handle"),
                                          (errno.EIO, "input/output error")])
def test_failing_file_system_while_sizing_the_reserve_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, usr1_calls: list[int], code: int,
        what: str) -> None:
    def failing(path: Any) -> Any:
        raise OSError(code, os.strerror(code), str(path))

    with pytest.raises(StorageError) as caught, storage_guard(tmp_path) as watch:
        monkeypatch.setattr(storage_faults.os, "scandir", failing)
        watch.grow_reserve()
        monkeypatch.undo()
    message = str(caught.value)
    assert caught.value.exit_code == 4 and "\n" not in message
    assert message == (
        f"{tmp_path}: {what} ({errno.errorcode[code]}) under {tmp_path}; the trials stopped at "
        "their last checkpoints. Hint: check the file system or its server (a stale handle: "
        f"the folder was removed or replaced on the server), then `hpo resume {tmp_path}` "
        "continues")


@pytest.mark.ray
@pytest.mark.slow
def test_full_mlflow_store_stops_the_run_cleanly(tmp_path: Path, small_disk: Path) -> None:
    """MLflow's store (sqlite) on a file system that fills up, the experiment folder elsewhere:
    one line naming the store, exit 4, Tune's state whole; with room again `hpo resume`
    finishes, one MLflow run per trial."""
    from mlflow.tracking import MlflowClient

    store = small_disk / "mlflow.db"
    uri = f"sqlite:///{store}"
    MlflowClient(tracking_uri=uri).create_experiment("tracked")  # the store, then a full disk
    filler = small_disk / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)
    space = tmp_path / "tracked.yaml"
    space.write_text(yaml.safe_dump({
        "name": "tracked", "trainable": f"{SUPPORT / 'study_trainables.py'}:steady",
        "metric": "score", "mode": "max", "search_space": {"x": {"grid": [1, 2]}},
        "constants": {"steps": 3, "sleep": 0.0}, "tracking": {"mlflow": {"tracking_uri": uri}},
        "checkpoint": {"frequency": 1, "keep": 1}}))
    exp_dir = tmp_path / "results" / "tracked"
    done = hpo_cli("run", str(space), "--storage", str(exp_dir.parent), "--cpus", "2")
    assert done.returncode == 4, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {store}: no space left on the file system (ENOSPC); the trials stopped at their "
        "last checkpoints. Hint: free space or raise the quota (or make the folder writable), "
        f"then `hpo resume {exp_dir}` continues"), done.stderr
    for state in exp_dir.glob("experiment_state-*.json"):
        json.loads(state.read_text())  # whole

    filler.unlink()
    done = hpo_cli("resume", str(exp_dir), "--cpus", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("tracked").experiment_id])
    assert sorted(float(run.data.params["x"]) for run in runs) == [1.0, 2.0]
    assert {run.info.status for run in runs} == {"FINISHED"}


def _fill(disk: Path, name: str) -> None:
    """Write until the file system is full, as other writers do after the reserve is freed."""
    fd = os.open(disk / name, os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError) as full:
            while True:
                os.write(fd, b"x" * 4096)
    finally:
        os.close(fd)
    assert full.value.errno == errno.ENOSPC


def test_a_state_file_cut_by_the_last_sync_is_written_whole_again(tmp_path: Path,
                                                                  small_disk: Path) -> None:
    """The worst instant: Tune's last sync cut the state file (the freed reserve was taken by
    other writes and the disk is full again). It is written again whole, by write and rename,
    into the room of the state's own reserve."""
    staging, exp_dir = tmp_path / "staging", small_disk / "exp"
    staging.mkdir()
    exp_dir.mkdir()
    state = json.dumps({"trials": ["x" * 200] * 1000}).encode()  # about 200 KB
    (staging / "experiment_state-2026.json").write_bytes(state)
    watch = StorageWatch(exp_dir)
    watch.grow_reserve(str(staging))
    (exp_dir / "experiment_state-2026.json").write_bytes(state[: len(state) // 3])  # cut
    _fill(small_disk, "others")
    watch.note(Fault(errno.ENOSPC, str(exp_dir)), stop=False)  # frees the run's reserve
    _fill(small_disk, "others-again")  # ... which other writes take
    watch.settle_state()
    assert (exp_dir / "experiment_state-2026.json").read_bytes() == state
    assert not list(exp_dir.glob(".*hpo-tmp"))
    storage_faults.check_resumable(exp_dir)  # no "cut short" refusal


def test_an_older_whole_state_is_kept_after_a_failed_last_sync(tmp_path: Path) -> None:
    """hpo's copy renames each file over its copy and the state last: a last sync that failed
    leaves the older state whole, matching the rows the folder holds. Writing the newer state
    over it would name checkpoints whose rows the folder lacks."""
    staging, exp_dir = tmp_path / "staging", tmp_path / "exp"
    staging.mkdir()
    exp_dir.mkdir()
    (staging / "experiment_state-2026.json").write_text('{"step": 2}')
    (staging / "searcher-state-2026.pkl").write_bytes(pickle.dumps({"step": 2}))
    (exp_dir / "experiment_state-2026.json").write_text('{"step": 1}')
    watch = StorageWatch(exp_dir)
    watch.grow_reserve(str(staging))
    watch.note(Fault(errno.ENOSPC, str(exp_dir)), stop=False)
    watch.settle_state()
    assert (exp_dir / "experiment_state-2026.json").read_text() == '{"step": 1}'
    assert pickle.loads((exp_dir / "searcher-state-2026.pkl").read_bytes()) == {"step": 2}
