"""The embedded Ray's minimal dashboard agent kept off the way to the first trial:
every reach into Ray's private parts for it, in one place, as read from Ray 2.60.0.

hpo installs Ray without its dashboard's packages, so the raylet starts its dashboard agent
with --minimal: it serves nothing and writes -1 (no such service) to three port files, which
the raylet waits for before it registers its node. hpo.ray_adapters.fast_start.lean_head.lean_head
has Ray find out at once that the agent is minimal, writes its port files ahead, and starts it at
the lowest CPU priority: nothing waits for it then, even where it starts late on a busy node.

Ray names none of these public; tests/driver/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - ray._private.utils.get_dashboard_dependency_error(), which services.start_raylet calls
    to choose the dashboard agent's --minimal flag by importing ray.dashboard.optional_deps
    (aiohttp, OpenTelemetry, Prometheus: 0.2-0.7 s before the raylet starts): wrapped for a
    block by a look for the top-level packages it imports, which answers at once where one
    is not installed (its import would fail) and asks Ray's own import otherwise
    (dependencies_looked_up_first);
  - services.start_raylet's raylet argument --dashboard_agent_command=<command>
    (niced_agent);
  - the port files a minimal agent (ray/dashboard/agent.py, DashboardAgent) writes with
    ray._raylet.persist_port(dir, node_id, name, port) into Node._session_dir for
    Node._node_id once it has started: -1 for METRICS_AGENT_PORT_NAME,
    METRICS_EXPORT_PORT_NAME and DASHBOARD_AGENT_LISTEN_PORT_NAME (agent_ports_ahead).
Ray is imported only when one of these is called.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpo.ray_adapters.reading import command_prefixed, replaced, sets_or_defines, source

AGENT_COMMAND = "--dashboard_agent_command="  # the raylet's argument


def minimal() -> bool:
    """Whether the raylet starts a minimal dashboard agent (some dashboard package is
    missing), as Ray decides."""
    from ray._private import utils as ray_utils

    return ray_utils.get_dashboard_dependency_error() is not None


@contextlib.contextmanager
def dependencies_looked_up_first() -> Iterator[None]:
    """While the block runs, Ray's look for the dashboard's packages answers at once where
    one is not installed (dashboard_deps_missing), and imports them as Ray does otherwise."""
    from ray._private import utils as ray_utils

    def looked_up_first(original: Any) -> Any:
        return lambda: dashboard_deps_missing() or original()

    with replaced(ray_utils, "get_dashboard_dependency_error", looked_up_first):
        yield


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
    return arg if nice is None else command_prefixed(arg, AGENT_COMMAND, [nice, "-n", "19"])


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    from ray._private import services
    from ray._private import utils as ray_utils

    start_raylet = " ".join(source(services.start_raylet).split())
    gaps = []
    if "ray._private.utils.get_dashboard_dependency_error()" not in start_raylet or \
            not callable(getattr(ray_utils, "get_dashboard_dependency_error", None)):
        gaps.append("services.start_raylet calls utils.get_dashboard_dependency_error()")
    if f'"{AGENT_COMMAND}{{}}".format( subprocess.list2cmdline(dashboard_agent_command)' \
            not in start_raylet:
        gaps.append(f"services.start_raylet: {AGENT_COMMAND}<list2cmdline(command)>")
    return gaps + _agent_port_gaps()


def _agent_port_gaps() -> list[str]:
    import ray._raylet
    from ray._private.node import Node
    from ray.dashboard.agent import DashboardAgent

    agent = " ".join(source(DashboardAgent).split())
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
