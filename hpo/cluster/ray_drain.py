"""Ray's node drain, as read from Ray 2.60.0 (`ray drain-node`, a hidden CLI over the GCS's
DrainNode call, reached through hpo.ray_adapters.gcs; tests/driver/test_ray_private.py checks it
against the installed Ray).

A preemption drain whose deadline has passed makes the GCS record the node's end as
AUTOSCALER_DRAIN_PREEMPTED, whether it ends by SIGTERM or SIGKILL; an actor that dies with it
raises a RayActorError with `preempted` set, which Tune does not count against a trial's
max_failures. A drain with a deadline still ahead, then a SIGTERM, is an ordinary node death.
"""

from __future__ import annotations

import time
from pathlib import Path

from hpo.cluster.auth import token_env
from hpo.ray_adapters import gcs


def find_node_id(client: object, ip: str, node_manager_port: int) -> str:
    """The alive Ray node at ip:node_manager_port (two jobs' nodes may share an IP)."""
    infos = gcs.alive_node_infos(client, timeout=10)
    for node_id, info in infos.items():
        if info.node_manager_address == ip and info.node_manager_port == node_manager_port:
            return str(node_id.hex())
    raise LookupError(f"no alive Ray node at {ip}:{node_manager_port}")


def alive_nodes(token_file: Path, gcs_address: str) -> set[tuple[str, int]]:
    """(ip, node manager port) of every alive node; empty while the GCS cannot be asked."""
    with token_env(token_file):
        try:
            infos = gcs.alive_node_infos(gcs.gcs_client(gcs_address), timeout=5)
        except Exception:  # GCS busy or restarting: asked again on the next poll
            return set()
    return {(i.node_manager_address, i.node_manager_port) for i in infos.values()}


def drain_node(token_file: Path, gcs_address: str, ip: str, node_manager_port: int,
               reason: str) -> None:
    """Drain the node at ip:node_manager_port for preemption, deadline now; raises when the
    GCS cannot be reached or refuses."""
    with token_env(token_file):
        client = gcs.gcs_client(gcs_address)
        node_id = find_node_id(client, ip, node_manager_port)
        accepted, why = gcs.drain_for_preemption(client, node_id, reason,
                                                         int(time.time() * 1000))
    if not accepted:
        raise RuntimeError(why or "refused")
