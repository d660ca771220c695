"""A lease whose Slurm job has ended is taken over at once, with one line that says so
(hpo.driver.guards.lease_holder, hpo.driver.guards.slurm_job): a resubmitted study does not
wait out the stale time of a job that `scancel` ended, nor is it refused by that job's driver
still beating on another host (or on this one) after its job ended."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hpo.driver.guards import lease
from hpo.driver.guards.lease import LEASE_FILE, Holder, experiment_lease, takeover_reason
from hpo.driver.guards.slurm_job import job_ended, state_ended


@pytest.mark.parametrize("text, ended", [
    ("RUNNING", None), ("PENDING", None), ("COMPLETING", None), ("SUSPENDED", None),
    ("REQUEUED", None), ("", None), ("CANCELLED", "CANCELLED"),
    ("CANCELLED by 1000", "CANCELLED"), ("CANCELLED+", "CANCELLED"),
    ("COMPLETED", "COMPLETED"), ("TIMEOUT", "TIMEOUT"), ("NODE_FAIL", "NODE_FAIL"),
    ("OUT_OF_MEMORY", "OUT_OF_MEMORY"), ("FAILED", "FAILED"), ("PREEMPTED", "PREEMPTED"),
])
def test_ended_states(text: str, ended: str | None) -> None:
    assert state_ended(text) == ended


def _slurm(answers: dict[str, tuple[int, str, str]]) -> Any:
    """A stand-in for subprocess.run: squeue's or sacct's (code, stdout, stderr)."""
    def run(args: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        code, out, err = answers.get(args[0], (1, "", "not found"))
        return subprocess.CompletedProcess(args, code, out, err)
    return run


@pytest.mark.parametrize("answers, said", [
    ({"squeue": (0, "RUNNING\n", "")}, None),
    ({"squeue": (0, "COMPLETING\n", "")}, None),
    ({"squeue": (0, "CANCELLED\n", "")}, "squeue: CANCELLED"),
    ({"squeue": (1, "", "slurm_load_jobs error: Invalid job id specified\n")},
     "squeue: no such job any more"),
    ({"squeue": (1, "", "slurm_load_jobs error: Invalid job id specified\n"),
      "sacct": (0, "CANCELLED by 0\n", "")}, "sacct: CANCELLED by 0"),
    ({"squeue": (1, "", "Unable to contact slurm controller\n")}, None),  # nothing to ask
])
def test_job_ended_asks_squeue_then_sacct(answers: dict[str, tuple[int, str, str]],
                                          said: str | None,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    assert job_ended("7009", run=_slurm(answers)) == said


ME = Holder("node1", 1, "", "7010", 0, 10.0, "me", "cl")


@pytest.mark.parametrize("holder, reason", [
    (replace(ME, host="node2", job_id="7009", token="a"), "its Slurm job 7009 has ended"),
    (replace(ME, host="node2", job_id="7009", cluster="other", token="a"), None),  # its own
    (replace(ME, host="node2", job_id="7009", cluster="", token="a"), None),  # unknown cluster
    (replace(ME, host="node2", token="a"), None),  # this very job: not judged by Slurm
    (replace(ME, host="node2", job_id="", token="a"), None),  # not a Slurm job
])
def test_a_job_that_slurm_says_ended_is_taken_over(holder: Holder, reason: str | None) -> None:
    found = takeover_reason(holder, ME, ended=lambda job: "squeue: CANCELLED")
    assert (found is None) if reason is None else (reason in (found or "")), found


def _fake_squeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(f"#!/bin/sh\necho {state}\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_a_cancelled_jobs_live_driver_here_is_taken_over_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The driver of a cancelled job runs on (it escaped the job's process tracking): the
    resubmitted job takes its lease at once; the old driver, fenced, stops at its next beat."""
    _fake_squeue(tmp_path, monkeypatch, "CANCELLED")
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 10
        while len(lease._stat(proc.pid)) <= 19 and time.monotonic() < deadline:
            time.sleep(0.02)
        holder = replace(lease.me({}), pid=proc.pid, started=lease._stat(proc.pid)[19],
                         job_id="7009", cluster="cl", token="theirs")
        (exp_dir / LEASE_FILE).write_bytes(lease._record(holder, 0))
        env = {"SLURM_JOB_ID": "7010", "SLURM_CLUSTER_NAME": "cl"}
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, "hpo.lease"), experiment_lease(exp_dir,
                                                                           env=env):
            mine = json.loads((exp_dir / LEASE_FILE).read_text())
            assert mine["job_id"] == "7010" and mine["cluster"] == "cl"
        assert time.monotonic() - started < 5
    finally:
        proc.kill()
        proc.wait()
    said = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert len(said) == 1 and "its Slurm job 7009 has ended (squeue: CANCELLED)" in said[0]


def test_a_running_jobs_lease_on_another_node_is_still_watched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_squeue(tmp_path, monkeypatch, "RUNNING")
    holder = Holder("node7", 4242, "99", "7009", 0, 10.0, "theirs", "cl")
    assert takeover_reason(holder, replace(holder, host="node1", job_id="7010")) is None


def test_the_next_job_removes_what_a_killed_job_left(tmp_path: Path) -> None:
    """A job killed before its end left its join point, its job folder and its private
    folder on the node; the study's next job removes them once it holds the lease."""
    from hpo.cluster.join import JOIN_POINT, sweep_left
    from hpo.cluster.render import node_dir

    old = f"9{os.getpid()}"  # no real job's id on this machine
    exp_dir, job_dir, private = tmp_path / "exp", tmp_path / "jobs" / old, Path(node_dir(old))
    for folder in (exp_dir, job_dir, private):
        folder.mkdir(parents=True)
    (exp_dir / JOIN_POINT).write_text(json.dumps({"job_id": old, "job_dir": str(job_dir)}))
    assert sweep_left(exp_dir, old) == []  # its own job (requeued): nothing to sweep
    assert sweep_left(exp_dir, "7010") == [exp_dir / JOIN_POINT, job_dir, private]
    assert not any(p.exists() for p in (exp_dir / JOIN_POINT, job_dir, private))
    assert sweep_left(exp_dir, "7010") == []
