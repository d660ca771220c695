"""`hpo slurm submit` on a real multi-node Slurm (testing/slurm_cluster.py), real Ray inside.

The session's cluster has 3 nodes of 2 CPUs, bound to real cores as sites bind them (a node
cannot declare more CPUs than this machine has); jobs ask for 2 CPUs per node (a whole node),
and those that share nodes with another job ask for 1 each. Each test reads what a user
would: the job's state and output file, and the experiment folder (`hostname` comes from
Tune's own results).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import dp_trainables
import numpy as np
import pytest
from slurm_jobs import (
    DP_TRAINABLES,
    GPU_TRAINABLES,
    _assert_exact_histories,
    _assert_nothing_left,
    _finished,
    _job,
    _output,
    _space,
    _submit,
    _wait_progress,
    _wait_running_on,
)

from hpo.results import load_results
from testing.slurm_cluster import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

def test_ray_spans_all_nodes_and_trials_run_on_several(slurm: SlurmTestCluster,
                                                        outputs: list[str]) -> None:
    # A fresh process per trial: with actor reuse, short trials under load could all run in
    # node1's first two warm processes before node2's and node3's had started (seen twice).
    space = _space(slurm, "span", nodes=3, samples=6, steps=3, sleep=0.5,
                   extra="reuse_actors: false\n",
                   trainable="study_trainables.py:steady_forked")
    job_id = _submit(slurm, space)
    outputs.append(job_id)
    out = _finished(slurm, job_id)
    assert "Ray cluster ready on 3 node(s) (node1, node2, node3)" in out, out
    frame = load_results(slurm.root / "work/results/span")
    assert len(frame) == 6 and set(frame["status"]) == {"TERMINATED"}, frame
    hosts = set(frame["hostname"])
    assert hosts <= {"node1", "node2", "node3"} and len(hosts) >= 2, hosts
    # every trial's worker forked by its node's fork server (hpo.driver.backends.node_start)
    assert list(frame["forked"]) == [True] * 6, frame[["hostname", "forked"]]
    node_logs = slurm.root / "work/results/span" / f"slurm-{job_id}"
    assert (node_logs / "ray-node3.log").exists()
    # srun -c: each node's step may run on the job's 2 CPUs there, and Ray is told 2
    assert all("--num-cpus=2 " in (node_logs / f"ray-{node}.log").read_text()
               for node in ("node1", "node2", "node3"))
    _assert_nothing_left(slurm, job_id)


def test_a_torch_trainable_finds_torch_imported_in_its_node_fork_server(
        slurm: SlurmTestCluster, outputs: list[str]) -> None:
    # One trial at a time, each in a fresh worker: the first waits until its node's fork
    # server has imported torch (told by the driver through the job's folder once it has
    # imported the trainable), so the second one's fork has it.
    space = _space(slurm, "preload", nodes=1, samples=2, steps=1, sleep=0.0,
                   extra="reuse_actors: false\nmax_concurrent: 1\n",
                   trainable="dp_trainables.py:torch_preloaded")
    job_id = _submit(slurm, space)
    outputs.append(job_id)
    _finished(slurm, job_id)
    frame = load_results(slurm.root / "work/results/preload").sort_values("trial_id")
    assert list(frame["forked"]) == [True, True], frame[["trial_id", "forked"]]
    assert frame["preloaded"].iloc[1], frame[["trial_id", "preloaded"]]
    _assert_nothing_left(slurm, job_id)


def test_two_jobs_on_the_same_nodes(slurm: SlurmTestCluster, outputs: list[str]) -> None:
    same_nodes = '  sbatch: ["--nodelist=node[1-2]"]\n'
    # one of each node's 2 CPUs per job: both jobs fit on node1-2 at once
    jobs = [_submit(slurm, _space(slurm, f"pair{k}", nodes=2, samples=4, steps=3, sleep=0.5,
                                  slurm_extra=same_nodes, cpus=1)) for k in (1, 2)]
    outputs.extend(jobs)
    heads = []
    for k, job_id in enumerate(jobs, start=1):
        out = _finished(slurm, job_id)
        assert "Ray cluster ready on 2 node(s) (node1, node2)" in out, out
        heads.append(re.search(r"head (\S+)", out).group(1))  # type: ignore[union-attr]
        frame = load_results(slurm.root / f"work/results/pair{k}")
        assert len(frame) == 4 and set(frame["status"]) == {"TERMINATED"}
        assert set(frame["hostname"]) <= {"node1", "node2"}
    _assert_nothing_left(slurm, *jobs)
    starts = [_job(slurm, j)["StartTime"] for j in jobs]
    ends = [_job(slurm, j)["EndTime"] for j in jobs]
    assert starts[1] < ends[0] and starts[0] < ends[1], (starts, ends)  # they overlapped
    assert heads[0] != heads[1], heads  # each job its own port block


def test_two_rank_horovod_trial_across_two_nodes_trains_correctly(
        slurm: SlurmTestCluster, outputs: list[str]) -> None:
    work = slurm.root / "work"
    markers, out_file = work / "hvd-ranks", work / "hvd-weights.npy"
    markers.mkdir(exist_ok=True)
    # 2 CPUs per node and 2 per rank: the placement group cannot pack both ranks on one node
    space = _space(slurm, "hvd2nodes", nodes=2, samples=1, steps=1, sleep=0.0, extra=(
        "distributed: {backend: horovod, workers: 2, cpus_per_worker: 2}\n"))
    text = space.read_text().replace("tests/support/study_trainables.py:steady",
                                     f"{DP_TRAINABLES}:one_step")
    text = text.replace("metric: score\nmode: max", "metric: loss\nmode: min")
    text = text.replace("search_space:\n  x: {uniform: [0.0, 1.0]}\n", "")
    text = re.sub(r"constants: .*\n", f"constants: {{batch_size: 32, out: {out_file}, "
                  f"marker_dir: {markers}}}\n", text)
    space.write_text(text)
    job_id = _submit(slurm, space)
    outputs.append(job_id)
    _finished(slurm, job_id)
    hosts = {name.split("-", 1)[1] for name in os.listdir(markers)}
    assert sorted(os.listdir(markers))[0].startswith("rank0") and len(hosts) == 2, hosts
    # the same parameters as one process taking the whole global batch
    # (tests/trial/test_distributed.py)
    np.testing.assert_allclose(np.load(out_file), dp_trainables.first_step_weights(32),
                               rtol=1e-5, atol=1e-6)


def _gpu_space(slurm: SlurmTestCluster, name: str, markers: Path, extra: str,
               slurm_extra: str) -> Path:
    """4 processes holding a GPU at once on node1-2: the job asks 2 of each node's 4 GPUs
    and 1 of its 2 CPUs (the other job has the other), half a CPU per GPU process."""
    markers.mkdir()
    space = _space(slurm, name, nodes=2, samples=4 if "gpus_per_trial" in extra else 2,
                   steps=1, sleep=0.0, extra=f"max_concurrent: 4\n{extra}",
                   slurm_extra='  gpus_per_node: 2\n  sbatch: ["--nodelist=node[1-2]"]\n'
                   + slurm_extra, cpus=1)
    text = space.read_text().replace("tests/support/study_trainables.py:steady",
                                     f"{GPU_TRAINABLES}:record_gpus")
    text = re.sub(r"constants: .*\n", f"constants: {{marker_dir: {markers}, expect: 4}}\n",
                  text)
    space.write_text(text.replace("search_space:\n  x: {uniform: [0.0, 1.0]}\n",
                                  "search_space:\n  x: {choice: [1, 2, 3, 4]}\n"))
    return space


def _allocated_gpus(slurm: SlurmTestCluster, job_id: str, timeout: float = 120) -> set[str]:
    """The GPU indices Slurm gave the running job on each node (`scontrol -d` shows them,
    e.g. GRES=gpu:2(IDX:2-3), or IDX:0,2 for the GPUs near one core, only while it runs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = subprocess.run(["scontrol", "-d", "show", "job", job_id], env=slurm.env,
                              capture_output=True, text=True, check=True).stdout
        found = set()
        for ranges in re.findall(r"IDX:([\d,-]+)", text):
            for low, _, high in (r.partition("-") for r in ranges.split(",")):
                found |= {str(i) for i in range(int(low), int(high or low) + 1)}
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"no GPU indices for job {job_id}: {text}")


def test_ranks_and_trials_get_distinct_gpus_from_slurm(slurm: SlurmTestCluster,
                                                        outputs: list[str]) -> None:
    """Two jobs on the same 2 nodes, 2 of 4 GRES GPUs and 1 of 2 CPUs each per node: a job
    of 2 DDP trials x 2 ranks (--gres form) and one of 4 whole-GPU trials (--gpus-per-node).
    The 8 processes ran at once, and every one saw exactly one GPU, its own, among its job's
    allocation."""
    work = slurm.root / "work"
    ranks_dir, trials_dir = work / "gpu-ranks", work / "gpu-trials"
    jobs = [_submit(slurm, _gpu_space(
                slurm, "gpuranks", ranks_dir, "distributed: {backend: ddp, workers: 2, "
                "cpus_per_worker: 0.5, gpus_per_worker: 1}\n", "  gpu_option: gres\n")),
            _submit(slurm, _gpu_space(slurm, "gputrials", trials_dir,
                                      "resources: {cpus_per_trial: 0.5, gpus_per_trial: 1}\n",
                                      ""))]
    outputs.extend(jobs)
    allocated = [_allocated_gpus(slurm, job_id) for job_id in jobs]
    assert [len(a) for a in allocated] == [2, 2] and not allocated[0] & allocated[1], allocated
    seen = []
    for job_id, markers, mine in zip(jobs, (ranks_dir, trials_dir), allocated, strict=True):
        _finished(slurm, job_id)
        records = [json.loads(p.read_text()) for p in markers.glob("*.json")]
        assert len(records) == 4, records
        for record in records:
            assert record["cuda"] is not None and record["cuda"] in mine, (mine, records)
            assert record["ray"] == [record["cuda"]], records
        seen += [(r["host"], r["cuda"]) for r in records]
    assert sorted(r["rank"] for r in json.loads("[" + ",".join(
        p.read_text() for p in ranks_dir.glob("*.json")) + "]")) == [0, 0, 1, 1]
    assert len(set(seen)) == 8, seen  # no GPU twice, across ranks, trials and jobs
    _assert_nothing_left(slurm, *jobs)


def test_usr1_stops_requeues_and_resumes(slurm: SlurmTestCluster,
                                         outputs: list[str]) -> None:
    space = _space(slurm, "walltime", nodes=2, samples=6, steps=8, sleep=0.5,
                   extra="max_concurrent: 2\n")
    job_id = _submit(slurm, space)
    outputs.append(job_id)
    exp_dir = slurm.root / "work/results/walltime"
    _wait_progress(exp_dir, job_id)
    # Exactly what --signal=B:USR1@60 does before the time limit: USR1 to the batch shell.
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], env=slurm.env, check=True)
    deadline = time.monotonic() + 120
    while "hpo: resuming" not in _output(job_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    before = load_results(exp_dir).set_index("trial_id")
    finished = before[before["status"] == "TERMINATED"]
    assert 2 <= len(finished) < 6, before
    out = _finished(slurm, job_id)
    assert _job(slurm, job_id)["Restarts"] == "1"
    assert f"requeueing job {job_id}" in out and "hpo: resuming" in out, out
    after = load_results(exp_dir).set_index("trial_id")
    assert len(after) == 6 and set(after["status"]) == {"TERMINATED"}, after
    assert (after["iterations"] == 8).all()
    _assert_exact_histories(exp_dir, 8)
    kept = after.loc[finished.index]  # finished trials were not re-run
    assert kept["best_score"].tolist() == finished["best_score"].tolist()
    assert kept["time_total_s"].tolist() == finished["time_total_s"].tolist()
    _assert_nothing_left(slurm, job_id)


def test_lost_worker_node_trials_retried_elsewhere(slurm: SlurmTestCluster,
                                                   outputs: list[str]) -> None:
    space = _space(slurm, "lost", nodes=3, samples=6, steps=10, sleep=0.5,
                   extra="failure: {max_failures: 3}\n")
    job_id = _submit(slurm, space)
    outputs.append(job_id)
    exp_dir = slurm.root / "work/results/lost"
    on_node3 = _wait_running_on(exp_dir, "node3", job_id)
    slurm.kill_node("node3")  # its slurmd, Ray raylet and trial workers, SIGKILLed
    try:
        _finished(slurm, job_id)
        frame = load_results(exp_dir).set_index("trial_id")
        assert len(frame) == 6 and set(frame["status"]) == {"TERMINATED"}, frame
        assert (frame["iterations"] == 10).all()
        _assert_exact_histories(exp_dir, 10)  # a retried trial's re-run steps kept once
        assert not (frame.loc[on_node3, "hostname"] == "node3").any()  # finished elsewhere
    finally:
        slurm.start_node("node3")
        slurm.wait_idle(timeout=120)


