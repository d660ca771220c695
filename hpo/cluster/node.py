"""One Ray node of a Slurm job: `python -m hpo.cluster.node head|worker JOB_DIR` (via srun).

It picks this node's address and a free port block, publishes them in the job dir (shared
file system), runs `ray start --block` with the job's token, passes SIGTERM/SIGINT on to it
and removes its node-local temp dir when Ray has stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hpo.cluster.network import node_address
from hpo.cluster.ports import pick_ports
from hpo.cluster.render import ray_start_args, ray_temp_dir
from hpo.cluster.slurm_env import NodeShare, lookup

HEAD_FILE, CONFIG_FILE, TOKEN_FILE, NODES_DIR = "head.json", "config.json", "auth_token", "nodes"


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
    return json.loads(path.read_text())


def ray_executable() -> str:
    """The `ray` script next to this interpreter (the job's venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else shutil.which("ray") or "ray"


def start_args(role: str, job_dir: Path, env: dict[str, str]) -> list[str]:
    """Decide address, ports and resources for this node; publish them; return the args."""
    config = json.loads((job_dir / CONFIG_FILE).read_text())
    share = NodeShare.from_env(env, socket.gethostname())
    ip = node_address(config.get("interface"))
    job_id = lookup(env, "job_id") or "0"
    ports = pick_ports(job_id)
    temp_dir = ray_temp_dir(job_id)
    Path(temp_dir).mkdir(mode=0o700, exist_ok=True)
    head_address = None
    if role == "head":
        write_json(job_dir / HEAD_FILE, {"address": f"{ip}:{ports.gcs}", "ip": ip})
    else:
        head_address = wait_for_file(job_dir / HEAD_FILE, config["timeout"])["address"]
    write_json(job_dir / NODES_DIR / f"{share.name}.json",
               {"name": share.name, "ip": ip, "cpus": share.cpus, "gpus": len(share.gpus),
                "port_block": ports.base})
    return ray_start_args(ray_executable(), ip=ip, ports=ports, share=share,
                          temp_dir=temp_dir, head_address=head_address,
                          dashboard=config.get("dashboard", False))


def main(role: str, job_dir: Path) -> int:
    env = dict(os.environ)
    args = start_args(role, job_dir, env)
    print("+", " ".join(args), flush=True)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(job_dir / TOKEN_FILE),
               RAY_USAGE_STATS_ENABLED="0")
    ray = subprocess.Popen(args, env=env)
    stopping: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        stopping.append(signum)
        ray.send_signal(signal.SIGTERM)  # ray start --block stops its processes on SIGTERM

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    try:
        code = ray.wait()
    finally:
        temp_dir = next(a for a in args if a.startswith("--temp-dir="))
        shutil.rmtree(temp_dir.removeprefix("--temp-dir="), ignore_errors=True)
    return 0 if stopping else code  # asked to stop: Ray's own exit code is noise


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("head", "worker"):
        sys.exit("usage: python -m hpo.cluster.node head|worker JOB_DIR")
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
