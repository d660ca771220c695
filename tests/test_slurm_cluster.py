"""`hpo slurm submit` on a real multi-node Slurm (testing/slurm_cluster.py), real Ray inside.

The session's cluster has 3 nodes of 2 CPUs, bound to real cores as sites bind them (a node
cannot declare more CPUs than this machine has); jobs ask for 2 CPUs per node (a whole node),
and those that share nodes with another job ask for 1 each. Each test reads what a user
would: the job's state and output file, and the experiment folder (`hostname` comes from
Tune's own results).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dp_trainables
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, trial_rows

from hpo.errors import ExperimentError
from hpo.results import load_results
from testing.slurm_cluster import SlurmTestCluster, Unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

VENV = Path(sys.executable).parent.parent
DP_TRAINABLES = Path(__file__).with_name("dp_trainables.py")
GPU_TRAINABLES = Path(__file__).with_name("gpu_trainables.py")


_STARTED: list[SlurmTestCluster] = []  # the run's one cluster, while it runs (see `slurm`)


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmTestCluster]:
    """The run's cluster. Each module that imports this fixture registers a copy of its own
    (pytest keys fixtures by module), and each copy would start a cluster and hold it to the
    end of the run (seen: 3 at once): every copy hands out the one kept here."""
    if not _STARTED:
        try:
            _STARTED.append(SlurmTestCluster(nodes=3, cpus=2).__enter__())
        except Unavailable as exc:  # never a silent skip: these tests are the Slurm feature
            pytest.fail(f"cannot start the test Slurm cluster on this machine: {exc}. It "
                        "needs root, network namespaces and `bash scripts/setup.sh --test`",
                        False)
    try:
        yield _STARTED[0]
    finally:  # session teardown: the first copy to end stops it
        if _STARTED:
            _STARTED.pop().stop()


def _space(slurm: SlurmTestCluster, name: str, *, nodes: int, samples: int, steps: int,
           sleep: float, extra: str = "", slurm_extra: str = "", cpus: int = 2,
           trainable: str = "study_trainables.py:steady") -> Path:
    work = slurm.root / "work"
    space = work / f"{name}.yaml"
    space.write_text(f"""\
name: {name}
trainable: tests/{trainable}
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
    text = space.read_text().replace("tests/study_trainables.py:steady",
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
    # the same parameters as one process taking the whole global batch (tests/test_distributed)
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
    text = space.read_text().replace("tests/study_trainables.py:steady",
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

