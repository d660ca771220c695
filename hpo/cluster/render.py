"""Pure render functions: the `ray start` and `srun` command lines of a job's Ray nodes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hpo.cluster.ports import RayPorts
from hpo.cluster.slurm_env import NodeShare

_HEAD_ONLY = ("--port", "--dashboard-port")


def node_dir(job_id: str) -> str:
    """This job's private (0700) folder on a node, removed when the node's Ray stops."""
    return f"/tmp/hpo-{job_id}"


def ray_temp_dir(job_id: str) -> str:
    """Node-local and short: Ray's AF_UNIX socket paths must stay under 107 bytes. Inside the
    private node_dir, because Ray makes its temp dir world-writable (made for /tmp/ray)."""
    return f"{node_dir(job_id)}/r"


def ray_start_args(ray: str, *, ip: str, ports: RayPorts, share: NodeShare, temp_dir: str,
                   head_address: str | None = None, dashboard: bool = False) -> list[str]:
    """`ray start --block` for one node: the head when head_address is None, else a worker.

    Every port comes from the job's block, CPUs and GPUs from the job's share of the node.
    """
    args = [ray, "start", "--block", f"--node-ip-address={ip}", f"--temp-dir={temp_dir}",
            "--disable-usage-stats", "--include-log-monitor=false",
            f"--num-gpus={len(share.gpus)}"]
    if share.cpus is not None:
        args.append(f"--num-cpus={share.cpus}")
    if head_address is None:
        args += ["--head", f"--include-dashboard={str(dashboard).lower()}"]
        if dashboard:
            args.append("--dashboard-host=127.0.0.1")
    else:
        args.append(f"--address={head_address}")
    for option, port in ports.named.items():
        if head_address is None or option not in _HEAD_ONLY:
            args.append(f"{option}={port}")
    return args


def srun_args(node: str, role: str, python: str, job_dir: Path, log: Path,
              cpus: int | None = None, container: Sequence[str] = ()) -> list[str]:
    """One single-task step on `node` running hpo's node process (which runs `ray start`).

    The step asks again for the job's `cpus` on that node (srun does not inherit sbatch's
    --cpus-per-task; a site that binds steps to cores would give it one) and for all of the
    job's memory there (--mem=0); it gets all of the job's GPUs there by default.
    `container` (`<runtime> exec [options] <image>`) runs the node process in the job's image.
    """
    share = [f"--cpus-per-task={cpus}"] if cpus is not None else []
    return ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node}", *share, "--mem=0",
            "--kill-on-bad-exit=0", f"--job-name=ray-{role}", f"--output={log}",
            f"--error={log}", *container, python, "-m", "hpo.cluster.node", role, str(job_dir)]
