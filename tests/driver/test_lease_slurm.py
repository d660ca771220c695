"""One writer per experiment folder across nodes: two Slurm jobs of the same YAML on two
nodes of the tests' real Slurm cluster (testing/slurm_cluster.py), sharing the folder as
nodes share a parallel file system: one job runs the experiment, the other stops at once."""

from __future__ import annotations

import re

import pytest
from slurm_jobs import _job, _output, _space, _submit, _wait_job

from hpo.results import load_results
from testing.slurm_cluster import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_two_jobs_on_two_nodes_one_writes(slurm: SlurmTestCluster,
                                          outputs: list[str]) -> None:
    space = _space(slurm, "leased", nodes=1, samples=2, steps=4, sleep=1.0)
    text = space.read_text()
    jobs = []
    for node in ("node1", "node2"):
        space.write_text(text.replace("slurm:\n", f'slurm:\n  sbatch: ["--nodelist={node}"]\n'))
        jobs.append(_submit(slurm, space))
    outputs.extend(jobs)
    done = {job_id: _wait_job(slurm, job_id) for job_id in jobs}
    codes = sorted(done[j]["ExitCode"] for j in jobs)
    assert codes == ["0:0", "3:0"], {j: (done[j]["ExitCode"], _output(j)) for j in jobs}
    refused = next(j for j in jobs if done[j]["ExitCode"] == "3:0")
    winner = next(j for j in jobs if j != refused)
    holder = _job(slurm, winner)["NodeList"]
    line = [x for x in _output(refused).splitlines() if x.startswith("error:")]
    assert len(line) == 1 and re.search(
        rf"in use by another hpo run \(host {holder}, pid \d+, Slurm job {winner} \(restart "
        r"0\); heartbeat \d+ s ago\)", line[0]), _output(refused)
    assert "Ray cluster ready" not in _output(refused)  # refused before starting Ray
    frame = load_results(slurm.root / "work/results/leased")
    assert len(frame) == 2 and set(frame["status"]) == {"TERMINATED"}
    assert set(frame["hostname"]) == {holder}
