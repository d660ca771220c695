"""What the cluster side would choose on this node, for `hpo doctor` to print."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from hpo.cluster.network import node_address
from hpo.cluster.ports import BLOCK, RayPorts, pick_ports
from hpo.cluster.render import ray_temp_dir
from hpo.cluster.slurm_env import Allocation, NodeShare
from hpo.errors import HpoError


def node_report(env: Mapping[str, str] | None = None,
             interface: str | None = None) -> dict[str, str]:
    """Label -> value: Slurm job and nodes, Ray address and interface, ports, temp dir, GPUs.

    Example:
        >>> for key, value in hpo.cluster.node_report().items(): print(key, value)
    """
    env = os.environ if env is None else env
    info: dict[str, str] = {}
    try:
        alloc = Allocation.from_env(env)
        info["slurm job"] = f"{alloc.job_id} (restart {alloc.restart_count})"
        info["nodes"] = f"{len(alloc.nodes)}: {', '.join(alloc.nodes)} (head {alloc.head})"
        job_id = alloc.job_id
    except HpoError as exc:
        info["slurm job"] = f"none ({str(exc).split('. Hint')[0]})"
        job_id = "0"
    try:
        address = node_address(interface)
    except HpoError as exc:
        address = f"unavailable: {exc}"
    info["ray interface"] = interface or "(the hostname's address)"
    info["ray address"] = address
    try:
        ports: RayPorts | None = pick_ports(job_id)
    except OSError as exc:
        ports, info["ray ports"] = None, str(exc)
    if ports is not None:
        info["ray ports"] = (f"{ports.base}-{ports.base + BLOCK - 1} (GCS {ports.gcs}, "
                             f"free on this node)")
    info["ray temp dir"] = ray_temp_dir(job_id)
    try:
        share = NodeShare.from_env(env, socket.gethostname())
        info["cpus"] = str(share.cpus) if share.cpus is not None else "all (not in Slurm)"
        info["gpus"] = ",".join(share.gpus) or "none"
    except HpoError as exc:
        info["cpus"] = str(exc)
    return info
