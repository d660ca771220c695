"""A cancelled job frees its study: after `scancel`, the cancelled job's driver ends within
Slurm's KillWait (the batch shell keeps it in the job), and the same `hpo slurm submit`
resumes the study at once, with nothing of the cancelled job left in the study's folder or
the job folders. On the tests' real Slurm cluster (testing/slurm_cluster.py: proctrack/
linuxproc, KillWait=5), which lost the driver before the batch shell waited for it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from slurm_jobs import _finished, _space, _submit, _wait_job, _wait_progress

from hpo.results import load_results
from testing.slurm_cluster import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
KILL_WAIT_S = 5  # testing/slurm_cluster.py's slurm.conf


def _ended_after(pid: int, since: float, timeout: float = 120) -> float:
    while Path(f"/proc/{pid}").exists() and time.monotonic() - since < timeout:
        time.sleep(0.05)
    return time.monotonic() - since


def test_after_scancel_the_same_submit_resumes_at_once(slurm: SlurmTestCluster,
                                                       outputs: list[str]) -> None:
    space = _space(slurm, "cancelled", nodes=2, samples=6, steps=8, sleep=0.5,
                   extra="max_concurrent: 2\n")
    first = _submit(slurm, space)
    outputs.append(first)
    exp_dir = slurm.root / "work/results/cancelled"
    _wait_progress(exp_dir, first)
    driver = json.loads((exp_dir / "hpo.lease").read_text())["pid"]
    cancelled = time.monotonic()
    subprocess.run(["scancel", first], env=slurm.env, check=True)
    took = _ended_after(driver, cancelled)
    print(f"\nthe cancelled job's driver ended {took:.2f} s after scancel "
          f"(KillWait {KILL_WAIT_S} s)")
    assert took < KILL_WAIT_S + 3, took  # Slurm's SIGKILL, and the time to deliver it
    _wait_job(slurm, first)
    second = _submit(slurm, space)  # at once, as docs/first-job.md says
    outputs.append(second)
    out = _finished(slurm, second)
    assert "in use by another hpo run" not in out and "hpo: resuming" in out, out
    frame = load_results(exp_dir)
    assert len(frame) == 6 and set(frame["status"]) == {"TERMINATED"}, frame
    assert not (slurm.root / "work" / "jobs" / first).exists()
    assert not (exp_dir / "slurm-head.json").exists() and not (exp_dir / "hpo.lease").exists()
