"""What the cluster side would choose on this node, for `hpo doctor` to print."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from hpo.cluster.network import node_address
from hpo.cluster.ports import BLOCK, RayPorts, pick_ports
from hpo.cluster.render import ray_temp_dir
from hpo.cluster.slurm_env import Allocation, NodeShare, usable_cpus
from hpo.errors import HpoError

Finding = tuple[str, str, bool]  # (label, value, fine)


def node_report(env: Mapping[str, str] | None = None,
                interface: str | None = None) -> dict[str, str]:
    """Label -> value: Slurm job and nodes, Ray address and interface, ports, temp dir, CPUs,
    GPUs.

    Example:
        >>> for key, value in hpo.cluster.node_report().items(): print(key, value)
    """
    return {label: value for label, value, _ in node_checks(env, interface)}


def node_checks(env: Mapping[str, str] | None = None, interface: str | None = None,
                usable: int | None = None, suffix: str = "") -> list[Finding]:
    """node_report's findings, each marked fine or not: inside a Slurm job, a Ray address
    other nodes cannot reach, or fewer usable CPUs (the affinity mask) than the job holds
    here, is not fine. `usable` defaults to this process's affinity mask; `suffix` is the
    site's hostname_suffix."""
    env = os.environ if env is None else env
    findings, job_id = _job(env)
    try:
        findings.append(("ray address", node_address(interface, suffix=suffix), True))
    except HpoError as exc:  # only a Slurm job's Ray needs other nodes to reach it
        findings.append(("ray address", f"unreachable from other nodes: {exc}", job_id == "0"))
    findings.insert(len(findings) - 1,
                    ("ray interface", interface or "(the hostname's address)", True))
    findings += [_ports(job_id), ("ray temp dir", ray_temp_dir(job_id), True)]
    return findings + _share(env, usable_cpus() if usable is None else usable)


def _job(env: Mapping[str, str]) -> tuple[list[Finding], str]:
    try:
        alloc = Allocation.from_env(env)
    except HpoError as exc:
        return [("slurm job", f"none ({str(exc).split('. Hint')[0]})", True)], "0"
    return [("slurm job", f"{alloc.job_id} (restart {alloc.restart_count})", True),
            ("nodes", f"{len(alloc.nodes)}: {', '.join(alloc.nodes)} (head {alloc.head})",
             True)], alloc.job_id


def _ports(job_id: str) -> Finding:
    try:
        ports: RayPorts = pick_ports(job_id)
    except OSError as exc:
        return ("ray ports", str(exc), True)
    return ("ray ports", f"{ports.base}-{ports.base + BLOCK - 1} (GCS {ports.gcs}, free on "
            "this node)", True)


def _share(env: Mapping[str, str], usable: int | None) -> list[Finding]:
    try:
        share = NodeShare.from_env(env, socket.gethostname(), usable)
    except HpoError as exc:
        return [("cpus", str(exc), False)]
    if share.job_cpus is None:
        cpus = (f"{usable} usable (affinity mask; not in Slurm)" if usable is not None
                else "all (not in Slurm)")
        return [("cpus", cpus, True), ("gpus", ",".join(share.gpus) or "none", True)]
    cpus = f"{share.cpus} usable by this step (affinity mask) of the {share.job_cpus} the job holds"
    if share.short_of_cpus:
        cpus += (f": Ray would run everything on {share.cpus}. Hint: srun -c {share.job_cpus} "
                 "(srun does not inherit sbatch's --cpus-per-task)")
    return [("cpus", cpus, share.short_of_cpus is None),
            ("gpus", ",".join(share.gpus) or "none", True)]
