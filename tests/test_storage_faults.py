"""A full, over-quota or read-only experiment file system (hpo/driver/storage_faults.py): one
line, exit code 4, Tune's snapshot left whole, and `hpo resume` finishes with exact counts."""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import hpo_cli

from hpo.driver import storage_faults
from hpo.driver.ray_session import _RunLog
from hpo.driver.storage_faults import Fault, StorageWatch, classify, storage_guard
from hpo.errors import StorageError
from hpo.results import load_results

STEPS = 5
SPEC = f"""
name: full
trainable: tests/test_trainables.py:steady
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
def test_full_disk_one_line_then_resume_finishes_exactly(tmp_path: Path,
                                                         small_disk: Path) -> None:
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
    assert len(done.stderr.splitlines()) <= 5, done.stderr  # the live view's last frame + it
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
    handler = _RunLog(tmp_path / "hpo.log")
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
    with pytest.raises(StorageError, match=r"^disk quota|the disk quota is exceeded"), \
            storage_guard(tmp_path) as watch:
        handler = _RunLog(tmp_path / "hpo.log")
        record = logging.LogRecord("ray.tune", logging.ERROR, __file__, 1, "Trial task failed: "
                                   "OSError: [Errno 122] Disk quota exceeded", None, None)
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
