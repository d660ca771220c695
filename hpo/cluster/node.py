"""One Ray node of a Slurm job: `python -m hpo.cluster.node head|worker|join JOB_DIR` (srun).

It picks this node's address and a free port block, publishes them in the job dir (shared
file system), runs `ray start --block` with the job's token, passes SIGTERM/SIGINT on to it
and removes its node-local temp dir when Ray has stopped. A `join` node belongs to another
job than the head's (`hpo slurm join`): it leaves when its own job asks (a leave file), when
the head's job stops or is gone, and drains itself first, so that Ray places nothing more
there and its trials' actors die as preempted (Tune counts no failure).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpo.cluster import own_import
from hpo.cluster.network import node_address
from hpo.cluster.ports import pick_ports
from hpo.cluster.ray_logs import print_ray_logs
from hpo.cluster.render import node_dir, ray_start_args, ray_temp_dir
from hpo.cluster.slurm_env import NodeShare, lookup, ray_node_env, usable_cpus

HEAD_FILE, CONFIG_FILE, TOKEN_FILE, NODES_DIR = "head.json", "config.json", "auth_token", "nodes"
STOP_FILE = "stop"
PRELOAD_FILE = "preload.json"  # the study's driver's word to the nodes' fork servers
STOP_GRACE_S = 5.0
START_ATTEMPTS = 3
ROLES = ("head", "worker", "join")


def node_file(job_dir: Path, name: str, job_id: str | None = None) -> Path:
    """Where a node publishes itself: `nodes/NAME.json` for the head's own job, with
    `@JOBID` for a joined job's node (it may share a host with the head's)."""
    return job_dir / NODES_DIR / (f"{name}@{job_id}.json" if job_id else f"{name}.json")


def leave_file(job_dir: Path, job_id: str) -> Path:
    """A joined job's request to its nodes: drain and leave."""
    return job_dir / NODES_DIR / f"leave-{job_id}"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically (other nodes poll for it): write a temp file, then rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def wait_for_file(path: Path, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(0.05)
    info: dict[str, Any] = json.loads(path.read_text())
    return info


def ray_executable() -> str:
    """The `ray` script next to this interpreter (the job's venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else shutil.which("ray") or "ray"


def start_args(role: str, job_dir: Path, env: dict[str, str]) -> list[str]:
    """Decide address, ports and resources for this node; publish them; return the args."""
    config = json.loads((job_dir / CONFIG_FILE).read_text())
    share = NodeShare.from_env(env, socket.gethostname(), usable_cpus())
    if share.short_of_cpus:
        print(f"hpo: {share.short_of_cpus}", flush=True)
    ip = node_address(config.get("interface"), suffix=config.get("hostname_suffix", ""))
    job_id = lookup(env, "job_id") or "0"
    ports = pick_ports(job_id, claim=True)  # held while this node runs
    temp_dir = ray_temp_dir(job_id)
    Path(node_dir(job_id)).mkdir(mode=0o700, exist_ok=True)
    head_address = None
    if role == "head":
        write_json(job_dir / HEAD_FILE, {"address": f"{ip}:{ports.gcs}", "ip": ip})
    else:
        head_address = wait_for_file(job_dir / HEAD_FILE, config["timeout"])["address"]
    write_json(node_file(job_dir, share.name, job_id if role == "join" else None),
               {"name": share.name, "ip": ip, "cpus": share.cpus, "gpus": len(share.gpus),
                "port_block": ports.base, "job_id": job_id, "role": role,
                "job_cpus": share.job_cpus, "note": share.short_of_cpus})
    return ray_start_args(ray_executable(), ip=ip, ports=ports, share=share,
                          temp_dir=temp_dir, head_address=head_address,
                          dashboard=config.get("dashboard", False))


def forked(args: list[str], private_dir: str, job_dir: Path) -> list[str]:
    """`ray start` (args) run by hpo.driver.backends.node_start, whose raylet's workers are forked
    by a fork server of this node (a fresh worker imports Ray and Tune: about 2 CPU-s, from the
    site's shared file system), unless the job asks for Ray's dashboard (a forked start has none:
    then every node starts its workers as Ray does)."""
    if json.loads((job_dir / CONFIG_FILE).read_text()).get("dashboard", False):
        return args
    ray, start, *options = args  # ray_start_args: the `ray` script, "start", its options
    # -P: the working folder's own `hpo` (a clone of the project) is not this hpo
    return [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []),
            "-m", "hpo.driver.backends.node_start", private_dir,
            str(job_dir / PRELOAD_FILE), *options]


def descendants(root: int) -> list[int]:
    """Every process below root (children first found, then theirs), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                raw = (entry / "stat").read_text()
                ppid = int(raw[raw.rindex(")") + 2:].split()[1])
                parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw[raw.rindex(")") + 2] != "Z"  # a zombie has ended (init may reap it late)


def stop_processes(pids: list[int], grace: float = STOP_GRACE_S,
                   first: signal.Signals = signal.SIGTERM) -> None:
    """`first` (SIGTERM) to `pids` (none of them this process's children: it does not reap
    them), SIGKILL to those still running after the grace period."""
    for sig in dict.fromkeys((first, signal.SIGKILL)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            if not pids:
                return
            time.sleep(0.05)


# Ray's agents (their titles): their SIGTERM handler ends them at once (os._exit), unless
# a report of their raylet's end to the GCS holds it off, which at a job's end never
# returned (the head's GCS stopping too): they get SIGKILL, the same end.
AGENTS = (b"ray::DashboardAgent", b"ray::RuntimeEnvAgent")


def stop_tree(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE_S,
              leaving: bool = False) -> None:
    """Stop `ray start --block` and every process it started (as `ray stop` does, but only
    ours): SIGKILL to Ray's agents, SIGTERM to the rest but the raylet and the GCS, then
    SIGKILL to `ray start`, which asked with SIGTERM would drain its node through the head's
    GCS for up to 30 s (its raylet and GCS end with it: Ray's fate sharing); SIGKILL to what
    is left after each grace period. Each node's stop at a job's end took the whole grace
    period (5 s) before. A node `leaving` a running study (drained first: _drain) ends its
    raylet with SIGTERM first, which reports the node's end to the head's GCS, still up, as
    Ray does (a drained node's as preempted: its trials' actors count no failure); at a
    job's end that report could wait for a head that has stopped."""
    commands = {pid: _command(pid) for pid in descendants(proc.pid)}
    names = {pid: os.path.basename(command.split(b"\0")[0]) for pid, command in commands.items()}
    last = [pid for pid, name in names.items() if name in (b"raylet", b"gcs_server")]
    if leaving:
        stop_processes([pid for pid in last if names[pid] == b"raylet"], grace)
    agents = [pid for pid, command in commands.items() if command.startswith(AGENTS)]
    stop_processes(agents, grace, first=signal.SIGKILL)
    stop_processes([pid for pid in commands if pid not in last + agents], grace)
    proc.kill()
    proc.wait()
    stop_processes(last, grace)  # ended with `ray start` already, where fate sharing works


def _command(pid: int) -> bytes:
    """A process's command line (b"" once it has gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def main(role: str, job_dir: Path) -> int:
    env = dict(os.environ)
    args = start_args(role, job_dir, env)
    private_dir = node_dir(lookup(env, "job_id") or "0")
    command = forked(args, private_dir, job_dir)
    print("+", " ".join(command), flush=True)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(job_dir / TOKEN_FILE),
               RAY_USAGE_STATS_ENABLED="0")
    # Ray hands each worker its GPUs from this list; MIOpen's caches stay with this job.
    cache = Path(private_dir) / "miopen"
    cache.mkdir(exist_ok=True)
    share = NodeShare.from_env(env, socket.gethostname())
    env = ray_node_env(env, share.gpus, str(cache))
    env.update(_gpu_cores_env(job_dir, env, share.name))
    env.update(own_import.workers_env(env))  # its -P: found without the working folder
    stopping: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda sig, _frame: stopping.append(sig))
    job_id = lookup(env, "job_id") or "0"
    try:
        started = _RayProcess(role, command, env, job_dir, job_id)
        # The batch script asks for the stop with a file on the shared file system: a
        # signal through srun would reach every process of the step (raylet included).
        while started.running(lambda: not stopping and not _asked_to_stop(role, job_dir,
                                                                           job_id)):
            time.sleep(0.2)
        ray = started.proc
        code = ray.poll()
        if code is None:
            leaving = role == "join" and (bool(stopping) or leave_file(job_dir, job_id).exists())
            if leaving:  # this job leaves a running study (not when the head's job is gone)
                _drain(job_dir, args, reason=f"Slurm job {job_id} leaves the study")
            stop_tree(ray, leaving=leaving)
            return 0
        if code:  # Ray ended with an error: its own logs go with the private folder
            print_ray_logs(job_id)
        return code
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)


class _RayProcess:
    """`ray start --block`, started again when a worker's start fails within the job's
    start-up time: Ray gives a raylet a fixed 30 s to register with the head, which a node
    whose start competes for its cores (many nodes registering at once, a busy shared node)
    can miss, while slurm.startup_timeout_s says how long the user lets start-up take."""

    def __init__(self, role: str, args: list[str], env: dict[str, str], job_dir: Path,
                 job_id: str) -> None:
        self.args, self.env, self.retries, self.job_id = args, env, role != "head", job_id
        timeout = json.loads((job_dir / CONFIG_FILE).read_text())["timeout"]
        self.deadline, self.attempt = time.monotonic() + timeout, 1
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        # Its own session: signals Slurm sends to this step's task do not reach Ray directly.
        return subprocess.Popen(self.args, env=self.env, start_new_session=True)

    def running(self, wanted: Callable[[], bool]) -> bool:
        """Whether Ray runs and is `wanted` (not asked to stop); a failed start is started
        again first if it may be."""
        code = self.proc.poll()
        if code is None:
            return wanted()
        if (not self.retries or code == 0 or self.attempt == START_ATTEMPTS
                or time.monotonic() >= self.deadline or not wanted()):
            return False
        with contextlib.suppress(ProcessLookupError):  # what the failed start left running
            os.killpg(self.proc.pid, signal.SIGKILL)
        print_ray_logs(self.job_id)  # the next start's logs get names of their own
        print(f"hpo: Ray's start on this node failed (exit code {code}, attempt "
              f"{self.attempt} of {START_ATTEMPTS}); starting it again", flush=True)
        self.attempt += 1
        self.proc = self._start()
        return True


def _gpu_cores_env(job_dir: Path, env: dict[str, str], node: str) -> dict[str, str]:
    """HPO_GPU_CORES for Ray's workers: the CPUs near each GPU (profile, else gres.conf)."""
    from hpo.cluster.gpu_cores import GPU_CORES_VAR, node_gpu_cores, table_text

    profile = json.loads((job_dir / CONFIG_FILE).read_text()).get("gpu_cores") or []
    try:
        table = table_text(node_gpu_cores(profile, env, node))
    except (OSError, ValueError) as exc:  # an unreadable layout: trials run unpinned
        print(f"hpo: GPU core layout unreadable ({exc}); trials are not pinned", flush=True)
        return {}
    if table:
        print(f"hpo: CPUs near each GPU (GPU=CPUs): {table}", flush=True)
    return {GPU_CORES_VAR: table} if table else {}


def _asked_to_stop(role: str, job_dir: Path, job_id: str) -> bool:
    if role != "join":
        return (job_dir / STOP_FILE).exists()
    # the head's job may delete its folder right after the stop file: both mean "leave"
    return (not job_dir.exists() or (job_dir / STOP_FILE).exists()
            or leave_file(job_dir, job_id).exists())


def _drain(job_dir: Path, args: list[str], reason: str) -> None:
    """Tell Ray this node goes away now (a preemption drain with its deadline reached): no
    more work is placed here, and actors that die with it count as preempted."""
    from hpo.cluster.ray_drain import drain_node

    option = dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)
    try:
        drain_node(job_dir / TOKEN_FILE, option["--address"], option["--node-ip-address"],
                   int(option["--node-manager-port"]), reason)
    except Exception as exc:  # the head may be gone already: leaving goes on regardless
        print(f"hpo: drain of this node not accepted ({exc}); stopping Ray anyway", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ROLES:
        sys.exit("usage: python -m hpo.cluster.node head|worker|join JOB_DIR")
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
