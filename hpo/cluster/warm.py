"""A warm local Ray that `hpo run` and `hpo resume` on this machine use instead of starting one.

Starting Ray is most of what a run waits for before its first trial (3-8 s on a laptop or an
interactive node, more with many CPUs). `hpo local up` starts a head once and leaves
it running, `hpo local down` stops it. It is private to its user as a Slurm job's is: its
folder (~/.hpo/local, or $HPO_LOCAL_RAY) is 0700 and holds a fresh token (Ray's token auth);
Ray's temp dir is inside a fresh 0700 folder under $TMPDIR or /tmp (hpo.cluster.temp_dir;
short: AF_UNIX socket paths are limited to 107 bytes, and a home folder on a cluster is long;
inside, because Ray makes its temp dir world-writable), named in head.json; it listens on
127.0.0.1 only, on the user's own port block (cluster/ports.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hpo.cluster import own_import
from hpo.cluster.auth import RayCluster, new_token
from hpo.cluster.bootstrap import gcs_listening
from hpo.cluster.node import descendants, stop_processes
from hpo.cluster.ports import pick_ports
from hpo.cluster.temp_dir import temp_parent
from hpo.errors import ExperimentError

FOLDER_VAR = "HPO_LOCAL_RAY"
HEAD_FILE = "head.json"
_IP = "127.0.0.1"
_STOP_GRACE_S = 10.0
PID_LINE = "raylet pid "  # hpo.driver.backends.warm_head's last line, where the workers are forked


def folder() -> Path:
    return Path(os.environ.get(FOLDER_VAR) or "~/.hpo/local").expanduser()


def running() -> tuple[RayCluster, int | None] | None:
    """The warm Ray and its CPUs, when one is up (a head file whose GCS does not answer, left
    by a reboot or a kill, is removed)."""
    head = folder() / HEAD_FILE
    if not head.exists():
        return None
    saved = json.loads(head.read_text())
    if not gcs_listening(saved["address"]):
        head.unlink(missing_ok=True)
        return None
    return RayCluster(saved["address"], _IP, Path(saved["token_file"]),
                      fork_socket=saved.get("fork_socket", ""),
                      raylet_pid=saved.get("raylet_pid", 0)), saved["cpus"]


def for_run(cpus: int | None) -> RayCluster | None:
    """The warm Ray a run on this machine should use: the one up, unless the run asks for
    another number of CPUs than it has (then the run starts its own, as without one)."""
    warm = running()
    if warm is None or (cpus is not None and cpus != warm[1]):
        return None
    return warm[0]


def up(cpus: int | None, gpus: int | None) -> RayCluster:
    """Start the warm Ray (refused while one is up)."""
    if running() is not None:
        raise ExperimentError(f"a warm Ray is already up ({folder()}). Hint: `hpo local down` "
                              "stops it")
    where = folder()
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    where.chmod(0o700)
    token = new_token(where)
    port = pick_ports(str(os.getuid())).gcs
    # not hpo-*: a run sweeps those that no live process holds (hpo.cluster.run_dir)
    private = tempfile.mkdtemp(prefix="hpolocal-", dir=temp_parent())
    temp_dir = f"{private}/r"
    ray_args = ["--head", f"--port={port}", f"--node-ip-address={_IP}",
                f"--temp-dir={temp_dir}", "--include-dashboard=false", "--no-monitor",
                "--disable-usage-stats", "--include-log-monitor=false",
                *([f"--num-cpus={cpus}"] if cpus is not None else []),
                *([f"--num-gpus={gpus}"] if gpus is not None else [])]
    # {job}: each run's job (hpo.ray_adapters.fast_start.worker_stub)
    fork_socket = f"{private}/fork-{{job}}.sock"
    # -P: the working folder's own `hpo` (a clone of the project) is not this hpo
    args = [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []),
            "-m", "hpo.driver.backends.warm_head", fork_socket, *ray_args]
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
           "RAY_USAGE_STATS_ENABLED": "0", **own_import.workers_env(),
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # Ray keeps 127.0.0.1 only when local-only
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        _stop(private)
        shutil.rmtree(private, ignore_errors=True)
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ExperimentError(f"`ray start --head` failed (exit {done.returncode}): {tail[0]}")
    address = f"{_IP}:{port}"
    raylet = _raylet_pid(done.stdout)
    forked = fork_socket if raylet else ""  # no pid said: Ray starts the workers itself
    (where / HEAD_FILE).write_text(json.dumps({
        "address": address, "token_file": str(token), "cpus": cpus, "temp_dir": private,
        "fork_socket": forked, "raylet_pid": raylet}))
    return RayCluster(address, _IP, token, fork_socket=forked, raylet_pid=raylet)


def _raylet_pid(said: str) -> int:
    """The raylet's pid, from hpo.driver.backends.warm_head's last line (0: not said, the workers
    are not forked)."""
    lines = said.strip().splitlines()
    last = lines[-1] if lines else ""
    tail = last[len(PID_LINE):] if last.startswith(PID_LINE) else ""
    return int(tail) if tail.isdigit() else 0


def down() -> int:
    """Stop the warm Ray's processes and remove its files; how many processes there were."""
    head = folder() / HEAD_FILE
    if not head.exists():
        return 0
    temp_dir = json.loads(head.read_text())["temp_dir"]
    count = _stop(temp_dir)
    shutil.rmtree(temp_dir, ignore_errors=True)
    head.unlink(missing_ok=True)
    return count


def _stop(private: str) -> int:
    """Stop the processes that run out of `private` and all their children (the agents and
    workers, whose command lines Ray rewrites); how many there were."""
    roots = _naming(private)
    pids = sorted({*roots, *(child for root in roots for child in descendants(root))})
    stop_processes(pids, _STOP_GRACE_S)
    return len(pids)


def _naming(private: str) -> list[int]:
    """This user's processes (but this one) whose command line names `private`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            command = Path(entry.path, "cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            continue
        if private.encode() in command:
            found.append(int(entry.name))
    return found
