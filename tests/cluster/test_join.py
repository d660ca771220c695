"""`hpo slurm join`: more Slurm jobs join a running study (hpo.cluster.join).

The refusals run without Slurm; the study itself runs on the real test cluster
(testing/slurm_cluster.py): a head job on one whole node, a job that joins and is cancelled
while its trials run, and a job that joins and leaves by itself when the head's job ends.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from calls import ROOT, cli_invoke
from slurm_jobs import (
    VENV,
    _assert_exact_histories,
    _assert_nothing_left,
    _job,
    _output,
    _wait_job,
    _wait_running_on,
)

from hpo.cluster.join import JOIN_POINT, publish
from hpo.cluster.node import STOP_FILE, TOKEN_FILE
from hpo.ray_adapters.node_loss import NODE_DIED, SIGTERMED, lost_with_its_node
from hpo.results import load_results
from hpo.spec.slurm import SlurmSettings
from testing.slurm_cluster import SlurmTestCluster


def _study(tmp_path: Path) -> tuple[Path, Path]:
    """An experiment folder with a spec and a head job's folder, as `hpo slurm run` leaves
    them while it runs."""
    exp_dir, job_dir = tmp_path / "results" / "s", tmp_path / "jobs" / "41"
    exp_dir.mkdir(parents=True)
    job_dir.mkdir(parents=True, mode=0o700)
    (job_dir / TOKEN_FILE).write_text("x")
    venv = tmp_path / "venv"  # the study's own venv, which render checks exists
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").touch()
    settings = SlurmSettings(nodes=3, time="01:00:00", partition="booster", signal_seconds=120,
                             venv=str(venv))
    publish(exp_dir, "41", job_dir, "s", settings)
    return exp_dir, job_dir


def test_dry_run_prints_a_join_script_and_submits_nothing(tmp_path: Path) -> None:
    exp_dir, _ = _study(tmp_path)
    code, out, err = cli_invoke(["slurm", "join", str(exp_dir), "--nodes", "2", "--dry-run",
                                 "--workdir", "/work"])
    assert code == 0, err
    lines = out.splitlines()
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --partition=booster" in lines
    assert "#SBATCH --job-name=s-join" in lines and "#SBATCH --signal=B:USR1@120" in lines
    assert not [line for line in lines if "--requeue" in line]  # a joined job just leaves
    assert f"python -m hpo slurm worker {exp_dir} &" in lines
    assert f"source {tmp_path}/venv/bin/activate" in lines and "cd /work" in lines


def test_status_lists_the_head_and_the_joined_nodes(tmp_path: Path) -> None:
    exp_dir, job_dir = _study(tmp_path)
    (job_dir / "nodes").mkdir()
    for name, job, cpus in (("node1", "41", 8), ("node7", "42", 4)):
        file = f"{name}.json" if job == "41" else f"{name}@{job}.json"
        (job_dir / "nodes" / file).write_text(json.dumps(
            {"name": name, "ip": f"10.0.0.{name[-1]}", "cpus": cpus, "gpus": 4, "job_id": job}))
    code, out, err = cli_invoke(["slurm", "status", str(exp_dir)])
    assert code == 0, err
    assert out.splitlines() == ["head job 41: node1 (10.0.0.1), 8 CPUs, 4 GPUs",
                                "joined job 42: node7 (10.0.0.7), 4 CPUs, 4 GPUs"]


@pytest.mark.parametrize("change, code, said", [
    ("no join point", 5, "is not running in a Slurm job"),
    ("head stopped", 5, "its head job 41 has ended"),
    ("head folder gone", 5, "its head job 41 has ended"),
    ("another owner", 2, "belongs to another user"),
    ("another ray", 2, "runs Ray 0.0.1"),
])
def test_a_study_that_cannot_be_joined_is_refused_in_one_line(
        tmp_path: Path, change: str, code: int, said: str) -> None:
    exp_dir, job_dir = _study(tmp_path)
    if change == "no join point":
        (exp_dir / JOIN_POINT).unlink()
    elif change == "head stopped":
        (job_dir / STOP_FILE).touch()
    elif change == "head folder gone":
        (job_dir / TOKEN_FILE).unlink()
        job_dir.rmdir()
    elif change == "another owner":
        os.chown(job_dir, 12345, 12345)
    else:
        point = json.loads((exp_dir / JOIN_POINT).read_text())
        (exp_dir / JOIN_POINT).write_text(json.dumps({**point, "ray": "0.0.1"}))
    got, out, err = cli_invoke(["slurm", "join", str(exp_dir), "--dry-run"])
    assert (got, out) == (code, ""), err
    assert said in err and len(err.strip().splitlines()) == 1, err


def test_ray_still_has_what_join_reads() -> None:
    """The text of a worker's exit on SIGTERM (node_loss); the GCS calls of the drain and the
    hook node_loss swaps are checked in tests/driver/test_ray_private.py."""
    import ray._private.worker

    assert SIGTERMED in inspect.getsource(ray._private.worker.Worker.main_loop)


def test_only_a_death_with_the_node_is_forgiven() -> None:
    from ray.exceptions import RayActorError

    assert lost_with_its_node(RayActorError(error_msg=f"The actor died because {NODE_DIED}."))
    assert lost_with_its_node(RayActorError(error_msg=f"Worker exits unexpectedly. {SIGTERMED}."))
    assert not lost_with_its_node(RayActorError(error_msg="The actor died: OOM"))
    drained = RayActorError(error_msg=f"... {NODE_DIED}.", preempted=True)
    assert not lost_with_its_node(drained)  # Ray itself does not count it already


@pytest.mark.slow
def test_a_worker_with_another_token_cannot_join(tmp_path: Path) -> None:
    """A joining node is a client of the head's GCS: with another job's token (or none) its
    `ray start --address` is refused and it never shows up as a node."""
    from hpo.cluster.node import ray_executable, stop_tree

    tokens = {}
    for name in ("head", "other"):
        tokens[name] = tmp_path / name
        tokens[name].write_text(name * 16)
        tokens[name].chmod(0o600)
    ray = ray_executable()

    def env(token: Path) -> dict[str, str]:
        return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
                "RAY_USAGE_STATS_ENABLED": "0"}

    # Ray's socket paths must stay under 107 bytes: a short temp dir, not pytest's tmp_path
    temp = Path(tempfile.mkdtemp(prefix="hpo-tok-"))
    log = tmp_path / "head.log"
    with log.open("wb") as out:
        head = subprocess.Popen(
            [ray, "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--port=32100",
             "--num-cpus=1", f"--temp-dir={temp}", "--include-dashboard=false"],
            env=env(tokens["head"]), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _listening(32100):
            assert time.monotonic() < deadline and head.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        joined = subprocess.run(
            [ray, "start", "--address=127.0.0.1:32100", "--node-ip-address=127.0.0.1",
             "--num-cpus=1", "--node-manager-port=32103", "--object-manager-port=32104",
             "--min-worker-port=32200", "--max-worker-port=32300"],
            env=env(tokens["other"]), capture_output=True, text=True, timeout=120)
        assert joined.returncode != 0, joined.stdout
        assert "InvalidAuthToken" in joined.stdout + joined.stderr or "Unauthenticated" in (
            joined.stdout + joined.stderr), joined.stderr[-2000:]
    finally:
        stop_tree(head)  # this head's processes only
        shutil.rmtree(temp, ignore_errors=True)


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
        return True
    return False


def _space(slurm: SlurmTestCluster) -> Path:
    work = slurm.root / "work"
    space = work / "joined.yaml"
    # each job takes a whole node (its 2 CPUs): the head's, and each joined job's, distinct
    space.write_text(f"""\
name: joined
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
num_samples: 24
search_space:
  x: {{uniform: [0.0, 1.0]}}
constants: {{steps: 30, sleep: 0.5}}
search: {{type: random, seed: 1}}
checkpoint: {{frequency: 1, keep: 1}}
reuse_actors: false
storage: {work / "results"}
slurm:
  nodes: 1
  cpus_per_node: 2
  time: "00:20:00"
  signal_seconds: 60
  venv: {VENV}
  job_dir: {work / "jobs"}
  startup_timeout_s: 120
""")
    return space


def _sbatch(slurm: SlurmTestCluster, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "hpo", "slurm", *args, "--workdir", str(ROOT)],
                          cwd=ROOT, env=slurm.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def _wait_for(ready: object, what: str, job_id: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen after {timeout:.0f} s\n{_output(job_id)}")
        time.sleep(0.2)


def _node_of(job_id: str, slurm: SlurmTestCluster) -> str:
    return _job(slurm, job_id)["NodeList"]


def _trials_moved(exp_dir: Path) -> dict[str, int]:
    """Trials that restarted after an error: the step each went on from (its checkpoint + 1)."""
    moved = {}
    for trial in exp_dir.glob("steady_*"):
        if (trial / "error.txt").exists():
            rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()
                    if line.strip()]
            moved[trial.name] = max(r["resumed_at"] for r in rows)
    return moved


@pytest.mark.slurm  # the real Slurm test cluster: not in the quick tier
@pytest.mark.slow
def test_jobs_join_a_running_study_leave_without_losing_or_doubling_work(
        slurm: SlurmTestCluster, outputs: list[str]) -> None:
    exp_dir = slurm.root / "work/results/joined"
    head = _sbatch(slurm, "submit", str(_space(slurm)))
    outputs.append(head)
    _wait_for(lambda: (exp_dir / JOIN_POINT).exists(), "the join point", head)
    warned, cancelled = (_sbatch(slurm, "join", str(exp_dir), "--cpus-per-node", "2")
                         for _ in range(2))
    outputs += [warned, cancelled]
    _wait_for(lambda: _job(slurm, warned)["JobState"] == "RUNNING", "the join job", warned)
    running_at = time.monotonic()
    on_warned = _wait_running_on(exp_dir, _job(slurm, warned)["NodeList"], head)
    print(f"join latency: {time.monotonic() - running_at:.1f} s from the join job running to "
          "a trial reporting on its node (polled every 0.2 s)")
    on_cancelled = _wait_running_on(exp_dir, _job(slurm, cancelled)["NodeList"], head)
    # the walltime warning (--signal=B:USR1) drains; scancel's SIGTERM reaches Ray directly
    subprocess.run(["scancel", "--batch", "--signal=USR1", warned], env=slurm.env, check=True)
    subprocess.run(["scancel", cancelled], env=slurm.env, check=True)
    assert _wait_job(slurm, warned)["ExitCode"] == "0:0", _output(warned)
    assert f"job {warned} left the study (SIGUSR1)" in _output(warned)
    _wait_job(slurm, cancelled)
    last = _sbatch(slurm, "join", str(exp_dir), "--cpus-per-node", "2")
    outputs.append(last)
    _wait_for(lambda: "hpo: joined joined" in _output(last), "the last job joined", last)
    head_job = _wait_job(slurm, head, timeout=400)
    assert head_job["JobState"] in ("COMPLETED", "COMPLETING"), _output(head)
    assert head_job["ExitCode"] == "0:0", _output(head)
    left = _wait_job(slurm, last, timeout=90)  # by itself, once the head's job ended
    assert left["ExitCode"] == "0:0", _output(last)
    assert f"the study's head job {head} ended; job {last} leaves" in _output(last)
    frame = load_results(exp_dir).set_index("trial_id")
    assert len(frame) == 24 and set(frame["status"]) == {"TERMINATED"}, frame  # none failed
    assert (frame["iterations"] == 30).all()
    _assert_exact_histories(exp_dir, 30)  # a moved trial's re-run steps kept once
    moved = _trials_moved(exp_dir)
    # a moved trial went on from its last checkpoint (from step 1: lost before its first)
    assert moved and max(moved.values()) > 1, moved
    assert set(on_warned + on_cancelled) <= set(frame.index)
    # every node's Ray, joined ones too, got its job's 2 CPUs there (srun -c: the step's mask
    # holds them; without it, a step on this core-bound cluster has one)
    for job in (head, warned, cancelled, last):
        logs = [log.read_text() for log in (exp_dir / f"slurm-{job}").glob("ray-*.log")]
        assert logs and all("--num-cpus=2 " in log for log in logs), (job, logs)
    assert not (exp_dir / JOIN_POINT).exists()
    _assert_nothing_left(slurm, head, warned, cancelled, last)
