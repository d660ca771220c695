"""A LUMI-G-shaped 2-node study in a container, end to end on the strict test cluster.

The container runtime is the stand-in (testing/container_standin.py): `singularity exec`
enters an image that holds the OS and the test run's venv (the venv "on top of the image"),
plus Apptainer's default binds. Inside, srun is absent and an unbound host path is missing;
the batch script's host-side helper starts every node's Ray step with the host's srun.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from calls import ROOT
from slurm_jobs import _wait_job

from hpo.results import load_results
from testing import container_standin
from testing.slurm_cluster import SlurmTestCluster, Unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
HOST_ONLY = "/run"  # on every host, neither in the image nor bound


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmTestCluster]:
    try:
        started = SlurmTestCluster(nodes=2, gpus=8).__enter__()
    except Unavailable as exc:  # never a silent skip
        pytest.fail(f"cannot start the strict test Slurm cluster: {exc}", False)
    try:
        yield started
    finally:
        started.stop()


def test_a_lumi_g_study_runs_in_the_container(cluster: SlurmTestCluster) -> None:
    work = cluster.root / "work"
    bin_dir = container_standin.install(cluster.root / "standin-bin")
    image = container_standin.make_image(cluster.root / "lumi-ai.sif.d")
    site = work / "site-lumi-g.yaml"
    site.write_text(f"base: lumi-g\ncpus_per_node: {cluster.cpus}\ninterface: eth0\n"
                    "mem: '0'\n")
    space = work / "lumi-container.yaml"
    space.write_text(f"""\
name: lumi-container
trainable: tests/support/study_trainables.py:contained
metric: score
mode: max
num_samples: 4
search_space:
  x: {{uniform: [0.0, 1.0]}}
constants: {{sleep: 0.5, host_only: {HOST_ONLY}}}
search: {{type: random, seed: 1}}
resources: {{cpus_per_trial: 1, gpus_per_trial: 0}}
storage: {work / "results"}
slurm:
  nodes: 2
  time: "00:20:00"
  signal_seconds: 60
  job_dir: {work / "jobs"}
  startup_timeout_s: 120
  container: {{image: {image}, venv: {sys.prefix}}}
""")
    env = {**cluster.env, "PATH": f"{bin_dir}:{cluster.env['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "hpo", "slurm", "submit", str(space), "--site",
                           str(site), "--workdir", str(ROOT)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = done.stdout.strip()
    job = _wait_job(cluster, job_id)
    output = ROOT / f"hpo-lumi-container-{job_id}.out"
    out = output.read_text() if output.exists() else "(no output file)"
    output.unlink(missing_ok=True)
    assert job["JobState"] in ("COMPLETED", "COMPLETING") and job["ExitCode"] == "0:0", (
        f"{job['JobState']} {job['ExitCode']}\n{out}")
    assert "Ray cluster ready on 2 node(s) (node1, node2)" in out, out
    frame = load_results(work / "results" / "lumi-container")
    assert len(frame) == 4 and set(frame["status"]) == {"TERMINATED"}, frame
    assert set(frame["hostname"]) <= {"node1", "node2"}
    # every trial ran inside: no srun, no unbound host path, the inside-only variable set
    assert set(frame["srun"]) == {"none"} and set(frame["host_only"]) == {False}, frame
    assert set(frame["fi_mr_cache_monitor"]) == {"userfaultfd"}, frame
    assert set(frame["cxi_fork_safe"].astype(str)) == {"1"}
    assert os.path.exists(HOST_ONLY)  # while the host has it
    assert not list(cluster.root.glob("nodetmp/*/hpo-steps.*")), "helper folder left behind"
