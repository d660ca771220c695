"""More Slurm jobs join a running study (`hpo slurm join`): the join point, the join script,
and what runs inside a joined allocation.

The head job (`hpo slurm run`) publishes a join point in the experiment folder while its Ray
cluster runs: its job id and job folder (0700: address and token, on the shared file system).
A joined job starts one Ray worker per node of its own allocation with the head's token and
its own port block (`python -m hpo.cluster.node join`), never writes experiment state, and
leaves when the head's job ends, before its own time limit, or on scancel (draining first).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hpo.cluster.container_job import host_steps
from hpo.cluster.node import (
    HEAD_FILE,
    NODES_DIR,
    STOP_FILE,
    TOKEN_FILE,
    leave_file,
    write_json,
)
from hpo.cluster.render import node_dir, srun_args
from hpo.cluster.sbatch import (
    WAIT_FOR_HPO,
    JobPython,
    environment,
    fill_template,
    sbatch_options,
)
from hpo.cluster.slurm_env import Allocation
from hpo.cluster.steps import Step, container_words, start_step
from hpo.errors import ClusterStartError, ExperimentError, HpoError, NotRunningError
from hpo.spec.slurm import SlurmSettings

JOIN_POINT = "slurm-head.json"
TEMPLATE = Path(__file__).with_name("hpo-join.sbatch")
LEAVE_GRACE_S = 30.0

_WORKER_RUN = """\
# USR1 comes {seconds} s before the time limit: pass it on, the nodes drain and leave.
trap 'kill -USR1 "$hpo_pid" 2>/dev/null' USR1
""" + WAIT_FOR_HPO + """\
exit "$status"
"""


@dataclass(frozen=True)
class JoinPoint:
    """A running study's head job, as its join point says."""

    job_id: str
    job_dir: Path
    ray: str
    python: str
    name: str  # the study's, and its `slurm:` keys as given: a joined job asks alike
    slurm: dict[str, object]


def _versions() -> dict[str, str]:
    import ray

    return {"ray": ray.__version__, "python": platform.python_version()}


def publish(exp_dir: Path, job_id: str, job_dir: Path, name: str,
            slurm: SlurmSettings) -> None:
    """Written by the head job once its cluster is up; removed (withdraw) before it stops."""
    write_json(exp_dir / JOIN_POINT, {
        "job_id": job_id, "job_dir": str(job_dir), "uid": os.getuid(), **_versions(),
        "name": name, "slurm": slurm.model_dump(mode="json", exclude_unset=True)})


def withdraw(exp_dir: Path) -> None:
    (exp_dir / JOIN_POINT).unlink(missing_ok=True)


def sweep_left(exp_dir: Path, job_id: str) -> list[Path]:
    """What an earlier job of this study left behind (one killed before its end: its join
    point, its job folder, its private folder on this node), removed by the next job once it
    holds the study's lease; what was removed."""
    try:
        earlier = json.loads((exp_dir / JOIN_POINT).read_text())
    except (OSError, ValueError):
        return []
    old = str(earlier.get("job_id", ""))
    if not old or old == job_id:
        return []
    gone = [exp_dir / JOIN_POINT]
    for folder in (Path(str(earlier.get("job_dir", ""))), Path(node_dir(old))):
        with contextlib.suppress(OSError):  # only a folder named for that job, and ours
            if folder.name in (old, f"hpo-{old}") and folder.is_dir() and \
                    folder.stat().st_uid == os.getuid():
                shutil.rmtree(folder, ignore_errors=True)
                gone.append(folder)
    withdraw(exp_dir)
    return gone


def join_point(exp_dir: Path) -> JoinPoint:
    """The running study's head job; one-line errors when it is not running or not ours."""
    path = exp_dir / JOIN_POINT
    if not exp_dir.is_dir():
        raise ExperimentError(f"{exp_dir}: no such experiment folder. Hint: give the folder "
                              "`hpo slurm submit` runs in (STORAGE/NAME)")
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise _not_running(exp_dir, f"{exp_dir} is not running in a Slurm job (no "
                           f"{JOIN_POINT}). Hint: start it with `hpo slurm submit`; join "
                           "while it runs") from None
    except (OSError, ValueError) as exc:
        raise ExperimentError(f"{path}: unreadable ({exc}). Hint: only the study's owner "
                              "can join it") from None
    point = JoinPoint(str(data["job_id"]), Path(data["job_dir"]), data["ray"], data["python"],
                      data["name"], data["slurm"])
    _check_owner(point)
    if not point.job_dir.is_dir() or (point.job_dir / STOP_FILE).exists():
        raise _not_running(exp_dir, f"{exp_dir}: its head job {point.job_id} has ended. "
                           "Hint: `hpo slurm submit` resumes the study; join it then")
    mine = _versions()
    if (mine["ray"], mine["python"].rsplit(".", 1)[0]) != (point.ray,
                                                           point.python.rsplit(".", 1)[0]):
        raise ExperimentError(f"{exp_dir} runs Ray {point.ray} on Python {point.python}; this "
                              f"hpo has Ray {mine['ray']} on Python {mine['python']}. Hint: "
                              "join from the study's own environment (its slurm.venv)")
    return point


def _not_running(exp_dir: Path, line: str) -> NotRunningError:
    """`line` for a study that no job runs; one that finished says so, and where its
    results are (a submit would only find it finished)."""
    trials = finished_trials(exp_dir)
    if trials is None:
        return NotRunningError(line)
    return NotRunningError(f"{exp_dir}: the study has finished: all {trials} trial(s) ran to "
                           f"their end; no job runs it. Hint: its results: `hpo results "
                           f"{exp_dir}`, `hpo best {exp_dir}`, `hpo report {exp_dir}`")


def finished_trials(exp_dir: Path) -> int | None:
    """How many trials a study has where every trial it asks for ran to its end; else None
    (also where its folder holds no readable experiment)."""
    from hpo.results import load_results, saved_spec
    from hpo.spec.load import spec_from_dict
    from hpo.spec.plan import trial_count

    try:
        frame = load_results(exp_dir)
        spec = spec_from_dict(saved_spec(exp_dir), str(exp_dir))
    except (HpoError, OSError, ValueError):
        return None
    statuses = set(frame["status"]) if len(frame) else set()
    enough = spec.time_budget_s is not None or len(frame) >= trial_count(spec)
    return len(frame) if statuses == {"TERMINATED"} and enough else None


def _check_owner(point: JoinPoint) -> None:
    try:
        owner = point.job_dir.stat().st_uid
        readable = os.access(point.job_dir / TOKEN_FILE, os.R_OK)
    except FileNotFoundError:
        return  # ended: said by the caller
    except OSError:
        owner, readable = -1, False
    if owner != os.getuid() or not readable:
        raise ExperimentError(f"{point.job_dir}: the study's job folder belongs to another "
                              "user (uid {owner}). Hint: only the study's owner can join it"
                              .replace("{owner}", str(owner)))


def members(point: JoinPoint) -> list[dict[str, object]]:
    """The study's nodes as they published themselves: the head job's and joined jobs'."""
    nodes = []
    for path in sorted((point.job_dir / NODES_DIR).glob("*.json")):
        with contextlib.suppress(OSError, ValueError):  # a node leaving meanwhile
            nodes.append(json.loads(path.read_text()))
    return nodes


def render_join(exp_dir: Path, name: str, settings: SlurmSettings, workdir: str) -> str:
    """The join job's sbatch script: the study's allocation options and environment, no
    requeue (a joined job that ends just leaves), USR1 before the time limit."""
    options = sbatch_options(f"{name}-join", settings.model_copy(update={"requeue": False}))
    options.insert(len(options) - len(settings.sbatch),  # the user's own options stay last
                   f"--signal=B:USR1@{settings.signal_seconds}")
    python = JobPython.for_job(settings, str(exp_dir))
    command = python.command(["-m", "hpo", "slurm", "worker", str(exp_dir)])
    run = _WORKER_RUN.format(seconds=settings.signal_seconds, command=command)
    if settings.container.enabled:
        run = host_steps() + "\n" + run
    return fill_template(TEMPLATE, str(exp_dir), options,
                         environment(settings, workdir, python), run)


def run_joined(exp_dir: Path, env: Mapping[str, str] = os.environ,
               report: Callable[[str], None] = print) -> int:
    """Inside the joined allocation: a Ray worker per node joined to the study's cluster;
    returns when they have left (the head's job ended, or this job was asked to leave)."""
    point = join_point(exp_dir)
    alloc = Allocation.from_env(env)
    asked: list[int] = []
    for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda sig, _frame: asked.append(sig))
    started = time.monotonic()
    steps = _launch(alloc, point.job_dir, exp_dir / f"slurm-{alloc.job_id}")
    try:
        _wait_joined(alloc, point, steps, asked)
        report(f"hpo: joined {exp_dir.name} (head job {point.job_id}) with {len(alloc.nodes)} "
               f"node(s) ({', '.join(alloc.nodes)}) after {time.monotonic() - started:.1f} s")
        while any(step.poll() is None for step in steps) and not asked:
            time.sleep(0.5)
    finally:
        if any(step.poll() is None for step in steps):
            leave_file(point.job_dir, alloc.job_id).touch()
            _wait_steps(steps, LEAVE_GRACE_S)
    if asked:
        report(f"hpo: job {alloc.job_id} left the study ({signal.Signals(asked[0]).name}): its "
               "nodes drained; their trials go on elsewhere from their last checkpoints")
    else:
        report(f"hpo: the study's head job {point.job_id} ended; job {alloc.job_id} leaves")
    return 0


def _launch(alloc: Allocation, job_dir: Path, log_dir: Path) -> list[Step]:
    log_dir.mkdir(parents=True, exist_ok=True)
    container = container_words()
    return [start_step(srun_args(node, "join", sys.executable, job_dir,
                                 log_dir / f"ray-{node}.log", alloc.cpus_on(node), container))
            for node in alloc.nodes]


def _wait_joined(alloc: Allocation, point: JoinPoint, steps: list[Step],
                 asked: list[int]) -> None:
    """Until every node of this job is alive in the study's Ray cluster."""
    from hpo.cluster.node import node_file
    from hpo.cluster.ports import RayPorts
    from hpo.cluster.ray_drain import alive_nodes

    config = json.loads((point.job_dir / "config.json").read_text())
    deadline = time.monotonic() + float(config["timeout"])
    files = [node_file(point.job_dir, node, alloc.job_id) for node in alloc.nodes]
    address = json.loads((point.job_dir / HEAD_FILE).read_text())["address"]
    while time.monotonic() < deadline and not asked:
        if any(step.poll() is not None for step in steps):
            raise ClusterStartError(f"a Ray worker of job {alloc.job_id} exited while joining. "
                                    f"Hint: see the ray-*.log files of slurm-{alloc.job_id}")
        if all(f.exists() for f in files):
            wanted = {(n["ip"], RayPorts(n["port_block"]).named["--node-manager-port"])
                      for n in (json.loads(f.read_text()) for f in files)}
            if wanted <= alive_nodes(point.job_dir / TOKEN_FILE, address):
                return
        time.sleep(0.2)
    if not asked:
        raise ClusterStartError(f"job {alloc.job_id}'s nodes did not join the study within "
                                f"{config['timeout']} s. Hint: see the ray-*.log files of "
                                f"slurm-{alloc.job_id}")


def _wait_steps(steps: list[Step], grace: float) -> None:
    deadline = time.monotonic() + grace
    for step in steps:
        try:
            step.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            step.kill()
            step.wait()
