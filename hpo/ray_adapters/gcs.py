"""Every reach of the cluster side into Ray's private parts (ray._raylet), in one place, as read
from Ray 2.60.0.

Ray names none of these public; tests/driver/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - ray._raylet.GcsClient(address=...): a client of a cluster's GCS (it blocks for 30 s on a
    GCS that is not listening yet); it hands its calls to InnerGcsClient:
      .get_all_node_info(timeout=..., state_filter=...) -> {NodeID: GcsNodeInfo}, and
      .drain_node(node_id, reason, reason_message, deadline_timestamp_ms) -> (accepted, why),
    the call behind Ray's hidden `ray drain-node` CLI;
  - ray._raylet.Config.initialize("") and AuthenticationTokenLoader.instance().reset_cache():
    Ray caches its config and auth token when first imported; these read the environment
    again, as Ray's own `ray.init` does when it turns token auth on;
  - ray._private.ray_constants.ENABLE_RAY_CLUSTER, read by services.get_node_ip_address when
    `ray.init(address=...)` resolves a loopback host (services.resolve_ip_for_localhost),
    and when `ray.init` starts a node without an address: off, the host stays 127.0.0.1; on
    (Ray's default, where a process imported ray before hpo's local-only import), it becomes
    the machine's address.
Ray is imported only when one of these is called (the CLI's help and validate import no Ray).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

from hpo.ray_adapters.reading import source


def gcs_client(address: str) -> Any:
    """A client of the GCS at host:port (blocks up to 30 s while nothing listens there)."""
    from ray._raylet import GcsClient

    return GcsClient(address=address)


def alive_node_infos(client: Any, timeout: float) -> dict[Any, Any]:
    """NodeID -> GcsNodeInfo of every node the GCS holds alive; raises when it cannot say."""
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    return client.get_all_node_info(timeout=timeout,
                                    state_filter=GcsNodeInfo.GcsNodeState.ALIVE)


def drain_for_preemption(client: Any, node_id: str, reason: str,
                         deadline_ms: int) -> tuple[bool, str]:
    """Ask the GCS to drain a node (hex id) for preemption, its deadline at deadline_ms (ms
    since the epoch): (accepted, why not)."""
    from ray.core.generated import autoscaler_pb2

    accepted, why = client.drain_node(
        node_id, autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
        reason, deadline_ms)
    return accepted, why


def reload_auth_settings() -> None:
    """Make Ray read its config and auth token (RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH) from the
    environment again."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@contextlib.contextmanager
def loopback_kept() -> Iterator[None]:
    """While the block runs, `ray.init(address="127.0.0.1:PORT")` connects to 127.0.0.1 (a
    warm local Ray listens there only), and a `ray.init` that starts a node starts it on
    127.0.0.1 (its servers listen there only), also in a process that imported ray before
    hpo: Ray would connect to the machine's address instead, where nothing listens, and wait
    for 60 s, or start its node listening on all interfaces."""
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def _parameters(method: Any) -> list[str]:
    return list(inspect.signature(method).parameters)


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    import ray._raylet as raylet
    from ray.core.generated import autoscaler_pb2
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    gaps = [f"ray._raylet.{name}" for name in
            ("GcsClient", "InnerGcsClient", "Config", "AuthenticationTokenLoader")
            if not callable(getattr(raylet, name, None))]
    if gaps:
        return gaps
    try:  # GcsClient's signature cannot be read: a bad address is refused before connecting
        raylet.GcsClient(address="no-port")
        gaps.append("GcsClient(address=...) refuses a bad address")
    except TypeError:
        gaps.append("GcsClient(address=...)")
    except ValueError:
        pass
    inner = raylet.InnerGcsClient
    wants = {"get_all_node_info": ["timeout", "state_filter"],
             "drain_node": ["node_id", "reason", "reason_message", "deadline_timestamp_ms"]}
    for name, params in wants.items():
        method = getattr(inner, name, None)
        if not callable(method) or not set(params) <= set(_parameters(method)):
            gaps.append(f"InnerGcsClient.{name}({', '.join(params)})")
    if _parameters(inner.drain_node)[1:5] != wants["drain_node"]:  # passed by position
        gaps.append(f"InnerGcsClient.drain_node{inspect.signature(inner.drain_node)}")
    if not callable(getattr(raylet.Config, "initialize", None)):
        gaps.append("Config.initialize")
    loader = raylet.AuthenticationTokenLoader
    if not (callable(getattr(loader, "instance", None))
            and callable(getattr(loader, "reset_cache", None))):
        gaps.append("AuthenticationTokenLoader.instance().reset_cache()")
    if not hasattr(GcsNodeInfo.GcsNodeState, "ALIVE"):
        gaps.append("GcsNodeInfo.GcsNodeState.ALIVE")
    gaps += _loopback_gaps()
    try:
        autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
    except ValueError:
        gaps.append("autoscaler_pb2.DrainNodeReason DRAIN_NODE_REASON_PREEMPTION")
    return gaps


def _loopback_gaps() -> list[str]:
    from ray._private import ray_constants, services

    reads = "ray_constants.ENABLE_RAY_CLUSTER" in source(services.get_node_ip_address)
    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER") or not reads:
        return ["ray_constants.ENABLE_RAY_CLUSTER, read by services.get_node_ip_address"]
    return []
