"""What hpo changes in the embedded Ray's start (`ray.init` starting a node) for its speed:
every reach into Ray's private parts for it, in one place, as read from Ray 2.60.0.

Ray names none of these public; tests/driver/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - ray._private.parameter.RayParams: the parameters `ray.init` builds to start a node; its
    __init__ is wrapped for a block so that each one built in it has no_monitor=True and
    include_log_monitor=False (both are __init__ parameters and attributes);
  - ray._private.node.Node.start_api_server(self, *, include_dashboard, raise_on_failure):
    starts the dashboard's head process (with include_dashboard=False still, serving only
    Ray's usage statistics) and waits until it is up; replaced for a block by one that starts
    nothing and leaves Node._webui_url None, as Ray's own path does when that process fails;
  - Node.start_raylet(self, ...), which records the raylet's process in
    Node.all_processes[PROCESS_TYPE_RAYLET]: wrapped for a block to hand its pid on (the fork
    server, hpo.ray_adapters.fast_start.fork_server, then imports Ray while the node comes up), and
    RayParams.setup_worker_path, the raylet's worker command, set for the block;
  - ray._private.services.start_ray_process(command, process_type, ...), which
    services.start_raylet calls with the raylet's command, whose
    --python_worker_command=<list2cmdline([sys.executable, setup_worker_path, ...])> is the
    worker command: wrapped for a block to start that Python with -S (no site), and the
    agents' commands as hpo.ray_adapters.fast_start.dashboard_agent and runtime_env_private say;
  - ray._private.services.get_node(gcs_address, node_id), which Node.__init__ calls until
    the new raylet has registered: its C++ side (GlobalStateAccessor::GetNode) sleeps 1 s
    between looks, and the raylet registers 1-1.5 s after its start, so `ray.init` waited
    about a second too long. Wrapped for a block: while the raylet runs, it first looks
    every 20 ms (every 0.2 s after 2 s, for at most Ray's own 30 s) with a
    ray._raylet.GcsClient(address=).get_all_node_info(timeout=, node_selectors=,
    state_filter=), then asks Ray's own, which finds the node at its first look.
Ray is imported only when one of these is called.
"""

from __future__ import annotations

import contextlib
import inspect
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from hpo.ray_adapters.fast_start import dashboard_agent, runtime_env
from hpo.ray_adapters.reading import replaced, source, source_of, unknown_config_keys

_LEAN = {"no_monitor": True, "include_log_monitor": False}
_API_SERVER_PARAMS = ("self", "include_dashboard", "raise_on_failure")
NODE_LOOK_S = 0.02
NODE_SLOW_LOOK_S = 0.2  # after NODE_FAST_S: a raylet that slow is starting on a busy node
NODE_FAST_S = 2.0
NODE_WAIT_S = 30.0  # Ray's own limit (raylet_start_wait_time_s); then Ray's look and error
# The embedded node's `_system_config`. Ray's look for a Unix socket not made yet retries
# every raylet_client_connect_timeout_milliseconds (1000), 10 times: at a node's start the
# raylet looks for its object store's socket, made by a thread of its own, and on 2 cores it
# lost that race in 3 of 8 starts and slept a whole second; every 20 ms instead, as long in
# all (a raylet or worker then logs each look after the first: up to 499 lines, not 9).
# Task events (each task's states, sent to the GCS every second) feed Ray's dashboard, its
# state API and ray.timeline() only: an embedded run has no dashboard, and neither Tune nor
# hpo reads them (a kept Ray's ray.timeline() is empty). The GCS spent 0.3 of 0.9 CPU-s on
# them in a run of 160 trials on 32 workers, and a driver's ray.shutdown waited up to
# 0.25 s for their last flush.
NODE_CONFIG = {"raylet_client_connect_timeout_milliseconds": 20,
               "raylet_client_num_connect_attempts": 500,
               "task_events_report_interval_ms": 0}
WORKER_COMMAND = "--python_worker_command="  # the raylet's argument


@contextlib.contextmanager
def lean_head(setup_worker: str | None = None,
              on_raylet: Callable[[int], None] | None = None,
              agent_port: int | None = None, look_fast: bool = True) -> Iterator[None]:
    """While the block runs, every RayParams built (the one `ray.init` builds to start its
    node) has no autoscaler monitor and no log monitor (and `setup_worker` as the raylet's
    worker command, when given), a head node starts no dashboard process, on_raylet (when
    given) is called with the raylet's pid as soon as it is started, a minimal dashboard
    agent is kept off the way (hpo.ray_adapters.fast_start.dashboard_agent), agent_port (when given)
    is told the raylet ahead as its runtime-env agent's, which then starts once asked
    (hpo.ray_adapters.fast_start.runtime_env), and `ray.init` sees the node registered within
    NODE_LOOK_S (with look_fast; without, Ray looks every second: hundreds of a Slurm job's
    nodes starting at once would ask the head's GCS thousands of times a second); restored
    after."""
    from ray._private import ray_constants, services
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    def lean(original: Any) -> Any:
        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            for name, value in _LEAN.items():
                setattr(self, name, value)
            if setup_worker:
                self.setup_worker_path = setup_worker
            if agent_port:
                self.runtime_env_agent_port = agent_port
        return init

    def no_api_server(original: Any) -> Any:
        def start_api_server(self: Any, *, include_dashboard: Any, raise_on_failure: Any) -> None:
            self._webui_url = None
        return start_api_server

    raylets: list[Any] = []  # the process started in the block

    def told(original: Any) -> Any:
        def start_raylet(self: Any, *args: Any, **kwargs: Any) -> None:
            if dashboard_agent.minimal():
                dashboard_agent.agent_ports_ahead(self._session_dir, self._node_id)
            original(self, *args, **kwargs)
            raylets.append(self.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process)
            if on_raylet:
                on_raylet(raylets[-1].pid)
        return start_raylet

    def looked_for_first(original: Any) -> Any:
        def get_node(gcs_address: str, node_id: str) -> Any:
            registered(gcs_address, node_id,
                       still_starting=lambda: all(raylet.poll() is None for raylet in raylets))
            return original(gcs_address, node_id)
        return get_node

    def raylet_commands(original: Any) -> Any:
        def start_ray_process(command: list[str], process_type: str, *args: Any,
                              **kwargs: Any) -> Any:
            if process_type == ray_constants.PROCESS_TYPE_RAYLET:
                if setup_worker:
                    command = [without_site(arg, setup_worker) for arg in command]
                if dashboard_agent.minimal():
                    command = [dashboard_agent.niced_agent(arg) for arg in command]
                if agent_port:
                    command = [runtime_env.gated_agent(arg, agent_port)
                               for arg in command]
            return original(command, process_type, *args, **kwargs)
        return start_ray_process

    with replaced(RayParams, "__init__", lean), replaced(Node, "start_api_server", no_api_server), \
            replaced(Node, "start_raylet", told), \
            replaced(services, "get_node", looked_for_first if look_fast else _as_is), \
            replaced(services, "start_ray_process", raylet_commands), \
            dashboard_agent.dependencies_looked_up_first():
        yield


def _as_is(original: Any) -> Any:
    return original


def without_site(arg: str, setup_worker: str) -> str:
    """A raylet argument, with the worker command's Python given -S where it runs
    setup_worker. The stub needs only the standard library, and `site` would run every .pth
    file of the environment for each worker: an editable install's import hook alone costs
    a Python's start 26 ms of its 35 (measured on 2 cores), spent once per worker."""
    plain = WORKER_COMMAND + subprocess.list2cmdline([sys.executable, setup_worker])
    if not arg.startswith(plain):
        return arg
    return (WORKER_COMMAND + subprocess.list2cmdline([sys.executable, "-S", setup_worker])
            + arg[len(plain):])


def registered(gcs_address: str, node_id: str, wait_s: float = NODE_WAIT_S,
               still_starting: Callable[[], bool] = lambda: True) -> bool:
    """Whether the node registered as alive with the GCS within wait_s, looked for every
    NODE_LOOK_S, then every NODE_SLOW_LOOK_S, while still_starting() (False also where the
    GCS cannot be asked, or the raylet ended: Ray's own look then decides and reports)."""
    from ray._raylet import GcsClient, NodeID
    from ray.core.generated.gcs_pb2 import GcsNodeInfo
    from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest

    selector = [GetAllNodeInfoRequest.NodeSelector(node_id=NodeID.from_hex(node_id).binary())]
    start = time.monotonic()
    try:
        gcs = GcsClient(address=gcs_address)
        while time.monotonic() - start < wait_s and still_starting():
            if gcs.get_all_node_info(timeout=5, node_selectors=selector,
                                     state_filter=GcsNodeInfo.GcsNodeState.ALIVE):
                return True
            fast = time.monotonic() - start < NODE_FAST_S
            time.sleep(NODE_LOOK_S if fast else NODE_SLOW_LOOK_S)
    except Exception:  # noqa: BLE001  Ray's own look reports what is wrong
        return False
    return False


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    from ray._private import services
    from ray._private.node import Node
    from ray._private.parameter import RayParams
    from ray._raylet import GcsClient

    gaps = []
    params = inspect.signature(RayParams.__init__).parameters
    built = RayParams()
    gaps += [f"RayParams({name}=...)" for name in _LEAN
             if name not in params or not hasattr(built, name)]
    if list(inspect.signature(Node.start_api_server).parameters) != list(_API_SERVER_PARAMS) or \
            "self._webui_url" not in source_of(Node):
        gaps.append(f"Node.start_api_server({', '.join(_API_SERVER_PARAMS)}), Node._webui_url")
    if "self.all_processes[ray_constants.PROCESS_TYPE_RAYLET] = [" not in \
            source(Node.start_raylet) or "setup_worker_path" not in vars(built):
        gaps.append("Node.start_raylet, all_processes[PROCESS_TYPE_RAYLET], "
                    "RayParams.setup_worker_path")
    gaps += _worker_command_gaps()
    if list(inspect.signature(services.get_node).parameters) != ["gcs_address", "node_id"] or \
            "ray._private.services.get_node(" not in source_of(Node):
        gaps.append("Node.__init__ calls services.get_node(gcs_address, node_id)")
    if "get_all_node_info" not in source(services):  # Cython: no signature
        gaps.append(f"{GcsClient.__name__}.get_all_node_info(timeout=, node_selectors=, "
                    "state_filter=)")
    return gaps + [f"Ray config {key}" for key in unknown_config_keys(NODE_CONFIG)]


def _worker_command_gaps() -> list[str]:
    from ray._private import services

    start_raylet = " ".join(source(services.start_raylet).split())
    shapes = ("start_worker_command = ( [ sys.executable, setup_worker_path, ]",
              f'f"{WORKER_COMMAND}{{subprocess.list2cmdline(start_worker_command)}}"',
              "start_ray_process( command, ray_constants.PROCESS_TYPE_RAYLET,")
    if list(inspect.signature(services.start_ray_process).parameters)[:2] != [
            "command", "process_type"] or not all(shape in start_raylet for shape in shapes):
        return ["services.start_raylet: --python_worker_command=[sys.executable, "
                "setup_worker_path, ...] through start_ray_process(command, process_type)"]
    return []


def head_gaps() -> list[str]:
    """What the lean head's start reads that the installed Ray lacks (its dashboard agent's
    too)."""
    return missing() + dashboard_agent.missing()
