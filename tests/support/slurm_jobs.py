"""Jobs on the tests' real Slurm cluster (testing/slurm_cluster.py): the run's one cluster
(the `slurm` fixture, registered in tests/conftest.py), an experiment YAML for it, and a job's
submission, state, output file and leftovers."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from calls import ROOT, SUPPORT, trial_rows

from hpo.errors import ExperimentError
from hpo.results import load_results
from testing.slurm_cluster import SlurmTestCluster, Unavailable

VENV = Path(sys.executable).parent.parent
DP_TRAINABLES = SUPPORT / "dp_trainables.py"
GPU_TRAINABLES = SUPPORT / "gpu_trainables.py"


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmTestCluster]:
    """The run's one cluster, started by the first test that asks for it."""
    try:
        cluster = SlurmTestCluster(nodes=3, cpus=2).__enter__()
    except Unavailable as exc:  # never a silent skip: these tests are the Slurm feature
        pytest.fail(f"cannot start the test Slurm cluster on this machine: {exc}. It needs "
                    "root, network namespaces and `bash scripts/setup.sh --test`", False)
    try:
        yield cluster
    finally:
        cluster.stop()


def _space(slurm: SlurmTestCluster, name: str, *, nodes: int, samples: int, steps: int,
           sleep: float, extra: str = "", slurm_extra: str = "", cpus: int = 2,
           trainable: str = "study_trainables.py:steady") -> Path:
    work = slurm.root / "work"
    space = work / f"{name}.yaml"
    space.write_text(f"""\
name: {name}
trainable: tests/support/{trainable}
metric: score
mode: max
num_samples: {samples}
search_space:
  x: {{uniform: [0.0, 1.0]}}
constants: {{steps: {steps}, sleep: {sleep}}}
search: {{type: random, seed: 1}}
checkpoint: {{frequency: 1, keep: 1}}
storage: {work / "results"}
{extra}slurm:
  nodes: {nodes}
  cpus_per_node: {cpus}
  time: "00:20:00"
  signal_seconds: 60
  venv: {VENV}
  job_dir: {work / "jobs"}
  startup_timeout_s: 120
{slurm_extra}""")
    return space


def _submit(slurm: SlurmTestCluster, space: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "hpo", "slurm", "submit", str(space),
                           "--workdir", str(ROOT)], cwd=ROOT, env=slurm.env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.fullmatch(r"\d+", done.stdout.strip()), done.stdout
    return done.stdout.strip()


def _job(slurm: SlurmTestCluster, job_id: str) -> dict[str, str]:
    text = subprocess.run(["scontrol", "show", "job", job_id], env=slurm.env,
                          capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", text))


def _wait_job(slurm: SlurmTestCluster, job_id: str, timeout: float = 240) -> dict[str, str]:
    """Until the batch script has ended (COMPLETING counts: a lost node delays cleanup)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = _job(slurm, job_id)
        if job["JobState"] in ("COMPLETED", "COMPLETING", "FAILED", "CANCELLED", "TIMEOUT",
                               "NODE_FAIL", "OUT_OF_MEMORY"):
            return job
        time.sleep(0.5)
    pytest.fail(f"job {job_id} not done after {timeout:.0f} s: {_job(slurm, job_id)}\n"
                f"{_output(job_id)}{_run_logs(slurm, job_id)}")


def _run_logs(slurm: SlurmTestCluster, job_id: str, lines: int = 60) -> str:
    """The ends of a failed or stalled job's hpo.log and its nodes' logs, for the failure's
    report."""
    logs = sorted(slurm.root.glob(f"work/results/*/slurm-{job_id}/*.log"))
    logs += [folder.parent / "hpo.log" for folder in
             slurm.root.glob(f"work/results/*/slurm-{job_id}")]
    shown = []
    for log in logs:
        with contextlib.suppress(OSError):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            shown.append(f"\n--- {log} (last {lines} lines)\n" + "\n".join(text))
    return "".join(shown)


def _output(job_id: str) -> str:
    files = list(ROOT.glob(f"hpo-*-{job_id}.out"))
    return files[0].read_text() if files else "(no output file)"


@pytest.fixture
def outputs() -> Iterator[list[str]]:
    """Job ids whose output files (written into the work tree) are removed afterwards."""
    ids: list[str] = []
    yield ids
    if os.environ.get("HPO_KEEP_SLURM_TEST_CLUSTER"):
        return
    for job_id in ids:
        for path in ROOT.glob(f"hpo-*-{job_id}.out"):
            path.unlink()


def _finished(slurm: SlurmTestCluster, job_id: str) -> str:
    job = _wait_job(slurm, job_id)
    out = _output(job_id)
    assert job["JobState"] in ("COMPLETED", "COMPLETING") and job["ExitCode"] == "0:0", (
        f"{job['JobState']} {job['ExitCode']}\n{out}{_run_logs(slurm, job_id)}")
    return out


def _assert_nothing_left(slurm: SlurmTestCluster, *job_ids: str) -> None:
    """Teardown: no Ray process in any node namespace, no job temp dir or token left."""
    for job_id in job_ids:
        for node in slurm.names:
            assert not (slurm.root / "nodetmp" / node / f"hpo-{job_id}").exists(), node
        assert not (slurm.root / "work" / "jobs" / job_id).exists()
    for node in slurm.names:
        pids = subprocess.run(["ip", "netns", "pids", slurm.netns(node)], capture_output=True,
                              text=True, check=True).stdout.split()
        names = [Path(f"/proc/{p}/comm").read_text().strip() for p in pids
                 if Path(f"/proc/{p}/comm").exists()]
        assert not [n for n in names if n != "slurmd"], f"{node}: {names}"


def _results_so_far(exp_dir: Path) -> pd.DataFrame | None:
    """The experiment's table, or None before its first snapshot."""
    try:
        return load_results(exp_dir)
    except ExperimentError:
        return None


def _wait_progress(exp_dir: Path, job_id: str, timeout: float = 180) -> None:
    """Until >= 2 trials finished and one runs with a checkpoint (as in test_resume)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = _results_so_far(exp_dir)
        if frame is not None and not frame.empty:
            running = frame[(frame["status"] == "RUNNING") & (frame["iterations"] >= 2)]
            if (frame["status"] == "TERMINATED").sum() >= 2 and len(running):
                return
        time.sleep(0.2)
    pytest.fail(f"no progress before the timeout\n{_output(job_id)}")


def _assert_exact_histories(exp_dir: Path, steps: int) -> None:
    """Every trial's result.json holds steps 1..steps, each once, in order."""
    for name, reports in trial_rows(exp_dir).items():
        assert [r["training_iteration"] for r in reports] == list(range(1, steps + 1)), name


def _wait_running_on(exp_dir: Path, node: str, job_id: str, timeout: float = 180) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = _results_so_far(exp_dir)
        if frame is not None and not frame.empty:
            there = frame[(frame["status"] == "RUNNING") & (frame["hostname"] == node)
                          & (frame["iterations"] >= 1)]
            if len(there):
                return there["trial_id"].tolist()
        time.sleep(0.2)
    pytest.fail(f"no trial ran on {node} before the timeout\n{_output(job_id)}")
