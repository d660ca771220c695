"""What hpo changes in the embedded Ray's start (`ray.init` starting a node) for its speed:
every reach into Ray's private parts for it, in one place, as read from Ray 2.60.0.

Ray names none of these public; tests/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - ray._private.parameter.RayParams: the parameters `ray.init` builds to start a node; its
    __init__ is wrapped for a block so that each one built in it has no_monitor=True and
    include_log_monitor=False (both are __init__ parameters and attributes);
  - ray._private.node.Node.start_api_server(self, *, include_dashboard, raise_on_failure):
    starts the dashboard's head process (with include_dashboard=False still, serving only
    Ray's usage statistics) and waits until it is up; replaced for a block by one that starts
    nothing and leaves Node._webui_url None, as Ray's own path does when that process fails;
  - ray._private.utils.get_dashboard_dependency_error(), which Node.start_raylet calls to
    choose the dashboard agent's --minimal flag by importing ray.dashboard.optional_deps
    (aiohttp, OpenTelemetry, Prometheus: 0.2-0.7 s before the raylet starts): wrapped for a
    block by a look for the top-level packages it imports, which answers at once where one
    is not installed (its import would fail) and asks Ray's own import otherwise;
  - Node.start_raylet(self, ...), which records the raylet's process in
    Node.all_processes[PROCESS_TYPE_RAYLET]: wrapped for a block to hand its pid on (the fork
    server, hpo.driver.fork_server, then imports Ray while the node comes up), and
    RayParams.setup_worker_path, the raylet's worker command, set for the block;
  - ray._private.services.start_ray_process(command, process_type, ...), which
    services.start_raylet calls with the raylet's command, whose
    --python_worker_command=<list2cmdline([sys.executable, setup_worker_path, ...])> is the
    worker command and --dashboard_agent_command=<command> the dashboard agent's: wrapped
    for a block to start that Python with -S (no site), and a minimal agent niced;
  - the port files a minimal dashboard agent (ray/dashboard/agent.py, DashboardAgent, started
    with --minimal where get_dashboard_dependency_error() finds a package missing) writes
    with ray._raylet.persist_port(dir, node_id, name, port) into Node._session_dir for
    Node._node_id once it has started: -1 (no such service) for METRICS_AGENT_PORT_NAME,
    METRICS_EXPORT_PORT_NAME and DASHBOARD_AGENT_LISTEN_PORT_NAME, which the raylet waits for
    before it registers: written ahead for a block, in Node.start_raylet;
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
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hpo.driver import runtime_env_private
from hpo.driver.ray_private import replaced, sets_or_defines, source_of, unknown_config_keys

RAY_VERSION = "2.60.0"  # the version these were read from

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
WORKER_COMMAND = "--python_worker_command="  # the raylet's arguments
AGENT_COMMAND = "--dashboard_agent_command="


@contextlib.contextmanager
def lean_head(setup_worker: str | None = None,
              on_raylet: Callable[[int], None] | None = None,
              agent_port: int | None = None, look_fast: bool = True) -> Iterator[None]:
    """While the block runs, every RayParams built (the one `ray.init` builds to start its
    node) has no autoscaler monitor and no log monitor (and `setup_worker` as the raylet's
    worker command, when given), a head node starts no dashboard process, on_raylet (when
    given) is called with the raylet's pid as soon as it is started, agent_port (when given)
    is told the raylet ahead as its runtime-env agent's, which then starts once asked
    (hpo.driver.runtime_env_private), and `ray.init` sees the node registered within
    NODE_LOOK_S (with look_fast; without, Ray looks every second: hundreds of a Slurm job's
    nodes starting at once would ask the head's GCS thousands of times a second); restored
    after."""
    from ray._private import ray_constants, services
    from ray._private import utils as ray_utils
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
            if minimal_agent():
                agent_ports_ahead(self._session_dir, self._node_id)
            if agent_port:
                runtime_env_private.agent_port_ahead(self._session_dir, self._node_id, agent_port)
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

    def looked_up_first(original: Any) -> Any:
        return lambda: dashboard_deps_missing() or original()

    def minimal_agent() -> bool:
        return ray_utils.get_dashboard_dependency_error() is not None

    def raylet_commands(original: Any) -> Any:
        def start_ray_process(command: list[str], process_type: str, *args: Any,
                              **kwargs: Any) -> Any:
            if process_type == ray_constants.PROCESS_TYPE_RAYLET:
                if setup_worker:
                    command = [without_site(arg, setup_worker) for arg in command]
                if minimal_agent():
                    command = [niced_agent(arg) for arg in command]
                if agent_port:
                    command = [runtime_env_private.gated_agent(arg, agent_port)
                               for arg in command]
            return original(command, process_type, *args, **kwargs)
        return start_ray_process

    with replaced(RayParams, "__init__", lean), replaced(Node, "start_api_server", no_api_server), \
            replaced(Node, "start_raylet", told), \
            replaced(services, "get_node", looked_for_first if look_fast else _as_is), \
            replaced(services, "start_ray_process", raylet_commands), \
            replaced(ray_utils, "get_dashboard_dependency_error", looked_up_first):
        yield


def _as_is(original: Any) -> Any:
    return original


def agent_ports_ahead(session_dir: str, node_id: str) -> None:
    """Write the port files a minimal dashboard agent writes once it has started: -1 each, no
    such service. The raylet waits for them before it registers its node, and the agent's
    Python took about 1 s to start on 2 cores, in the middle of everything else that `hpo
    run` starts; it writes the same values when it is up."""
    from ray._raylet import (
        DASHBOARD_AGENT_LISTEN_PORT_NAME,
        METRICS_AGENT_PORT_NAME,
        METRICS_EXPORT_PORT_NAME,
        persist_port,
    )

    for name in (METRICS_AGENT_PORT_NAME, METRICS_EXPORT_PORT_NAME,
                 DASHBOARD_AGENT_LISTEN_PORT_NAME):
        persist_port(session_dir, node_id, name, -1)


def niced_agent(arg: str) -> str:
    """A raylet argument, with the minimal dashboard agent's command it names run at the
    lowest CPU priority: it serves nothing while a run goes (it has no server; nothing waits
    for it once its port files are written ahead), and its start competed for the cores with
    the workers' fork server and the driver, on the way to the first trial."""
    nice = shutil.which("nice")
    if not arg.startswith(AGENT_COMMAND) or nice is None:
        return arg
    return (AGENT_COMMAND + subprocess.list2cmdline([nice, "-n", "19"]) + " "
            + arg[len(AGENT_COMMAND):])


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


def dashboard_deps_missing() -> ImportError | None:
    """The ImportError Ray's get_dashboard_dependency_error would return where a top-level
    package ray.dashboard.optional_deps imports is not installed, found without importing
    any; None where all are (then only Ray's import can tell: a namespace package such as
    opentelemetry may lack the part it imports)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("ray.dashboard.optional_deps")
    if spec is None or spec.origin is None:
        return ImportError("No module named 'ray.dashboard.optional_deps'")
    tree = ast.parse(Path(spec.origin).read_text())
    imported = [alias.name if isinstance(node, ast.Import) else node.module or ""
                for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names]  # in Ray's order: its error names the first missing
    names = dict.fromkeys(name.split(".")[0] for name in imported if name)
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    return ImportError(f"No module named {missing[0]!r}", name=missing[0]) if missing else None


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    from ray._private import services
    from ray._private import utils as ray_utils
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
            inspect.getsource(Node.start_raylet) or "setup_worker_path" not in vars(built):
        gaps.append("Node.start_raylet, all_processes[PROCESS_TYPE_RAYLET], "
                    "RayParams.setup_worker_path")
    gaps += _worker_command_gaps()
    if "ray._private.utils.get_dashboard_dependency_error()" not in \
            inspect.getsource(services.start_raylet) or \
            not callable(getattr(ray_utils, "get_dashboard_dependency_error", None)):
        gaps.append("services.start_raylet calls utils.get_dashboard_dependency_error()")
    if list(inspect.signature(services.get_node).parameters) != ["gcs_address", "node_id"] or \
            "ray._private.services.get_node(" not in source_of(Node):
        gaps.append("Node.__init__ calls services.get_node(gcs_address, node_id)")
    if "get_all_node_info" not in inspect.getsource(services):  # Cython: no signature
        gaps.append(f"{GcsClient.__name__}.get_all_node_info(timeout=, node_selectors=, "
                    "state_filter=)")
    return gaps + [f"Ray config {key}" for key in unknown_config_keys(NODE_CONFIG)]


def _worker_command_gaps() -> list[str]:
    from ray._private import services

    start_raylet = " ".join(inspect.getsource(services.start_raylet).split())
    shapes = ("start_worker_command = ( [ sys.executable, setup_worker_path, ]",
              f'f"{WORKER_COMMAND}{{subprocess.list2cmdline(start_worker_command)}}"',
              f'"{AGENT_COMMAND}{{}}".format( subprocess.list2cmdline(dashboard_agent_command)',
              "start_ray_process( command, ray_constants.PROCESS_TYPE_RAYLET,")
    if list(inspect.signature(services.start_ray_process).parameters)[:2] != [
            "command", "process_type"] or not all(shape in start_raylet for shape in shapes):
        return ["services.start_raylet: --python_worker_command=[sys.executable, "
                "setup_worker_path, ...] and --dashboard_agent_command= through "
                "start_ray_process(command, process_type)"]
    return _agent_port_gaps()


def _agent_port_gaps() -> list[str]:
    import ray._raylet
    from ray._private.node import Node
    from ray.dashboard.agent import DashboardAgent

    agent = " ".join(inspect.getsource(DashboardAgent).split())
    shapes = ("if not self.minimal: self._init_non_minimal() else:",
              "persist_port( self.session_dir, self.node_id, METRICS_AGENT_PORT_NAME, -1, )",
              "persist_port( self.session_dir, self.node_id, METRICS_EXPORT_PORT_NAME, -1, )",
              "DASHBOARD_AGENT_LISTEN_PORT_NAME, self.listen_port if self.http_server and "
              "launch_http_server else -1, )",
              "# http_server is None in minimal.")
    names = ("persist_port", "DASHBOARD_AGENT_LISTEN_PORT_NAME", "METRICS_AGENT_PORT_NAME",
             "METRICS_EXPORT_PORT_NAME")
    if not all(shape in agent for shape in shapes) or \
            not all(hasattr(ray._raylet, name) for name in names) or \
            not all(sets_or_defines(Node, name) for name in ("_session_dir", "_node_id")):
        return ["a minimal DashboardAgent writes -1 to its three port files "
                "(ray._raylet.persist_port) in Node._session_dir for Node._node_id"]
    return []
