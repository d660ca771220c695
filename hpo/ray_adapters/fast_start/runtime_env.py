"""The embedded Ray's runtime-env agent kept off the way to the first trial: every
reach into Ray's private parts for it, in one place, as read from Ray 2.60.0.

Tune declares each trial actor with `runtime_env={"env_vars": ...}` (its default
PL_DISABLE_FORK=1 and the driver's values of a few variables it propagates), so the raylet asks
its runtime-env agent (a Python process with an HTTP server) before it starts each worker, and
at its start, unless told the agent's port, it waits until that agent has bound one (1.1-1.2
s on 2 cores, while the agent imports Ray). In an embedded Ray every worker inherits the
raylet's environment, which hpo gives those same values: the trial actors then carry no runtime
env, nothing asks the agent, and the raylet is told the agent's port ahead. The agent itself
starts only once something asks for a runtime env (hpo.ray_adapters.fast_start.agent_gate).

Ray names none of these public; tests/driver/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - ray.tune.execution.class_cache._ActorClassCache.get(self, trainable_cls), which wraps a
    trainable with ray.remote(runtime_env={"env_vars": env_vars}) (env_vars: DEFAULT_ENV_VARS
    and the driver's values of ENV_VARS_TO_PROPAGATE), replaced for a block
    (trial_actors_without_runtime_env);
  - RayParams.runtime_env_agent_port (0 or None: the agent binds any port and writes it into
    a port file, which the raylet waits for; a port given: the raylet goes on without the
    agent, which binds that port with SO_REUSEADDR in ray/_private/runtime_env/agent/main.py),
    given by hpo.ray_adapters.fast_start.lean_head's lean_head a port held for it (reserved_port);
  - services.start_raylet's raylet argument --runtime_env_agent_command=<command>, which
    lean_head has start through hpo's gate (gated_agent), which binds as the agent does
    (its --node-ip-address=, the first of socket.getaddrinfo(address, port,
    type=SOCK_STREAM)) and leaves the raylet's first ask refused or reset: the raylet's
    agent client (C++, not checked here; the tests ask a runtime env of the embedded Ray)
    retries both every second for 30 s; and the raylet's RAY_RAYLET_PID in the agent's
    environment (ray/_private/process_watcher.py).
Ray is imported only when one of these is called.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import socket
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hpo.ray_adapters.fast_start import agent_gate
from hpo.ray_adapters.fast_start.raylet_env import environ_of
from hpo.ray_adapters.reading import command_prefixed, replaced, source

AGENT_COMMAND = "--runtime_env_agent_command="  # the raylet's argument (gated by lean_head)
# Tune's DEFAULT_ENV_VARS, which the embedded Ray's raylet (and so each worker) is given.
TUNE_DEFAULT_ENV = {"PL_DISABLE_FORK": "1"}


@contextlib.contextmanager
def reserved_port() -> Iterator[int]:
    """A TCP port for the agent, held while the block runs: bound with SO_REUSEADDR on every
    address and never listening, so that the agent (which binds it with SO_REUSEADDR, and
    listens) can take it whenever its Python is up, and nothing else can meanwhile."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("", 0))
        yield int(holder.getsockname()[1])


def gated_agent(arg: str, port: int) -> str:
    """A raylet argument, with the runtime-env agent's command it names, whose port is `port`,
    started once asked (hpo.ray_adapters.fast_start.agent_gate)."""
    return command_prefixed(arg, AGENT_COMMAND,
                            [sys.executable, "-S", agent_gate.__file__, str(port)])


# The embedded Ray's raylet while it runs (None without one): its workers inherit its
# environment.
_raylet_pid: int | None = None


def note_raylet(pid: int | None) -> None:
    """The embedded Ray's raylet was started as `pid` (None: that Ray is gone)."""
    global _raylet_pid
    _raylet_pid = pid


def workers_environ() -> dict[str, str] | None:
    """The environment the embedded Ray's workers inherit (its raylet's), None where this
    process runs no embedded Ray or cannot read it."""
    import ray

    if _raylet_pid is None or not ray.is_initialized():
        return None
    try:
        return environ_of(_raylet_pid)
    except OSError:  # the raylet is gone
        return None


def tune_env_vars() -> dict[str, str]:
    """The env_vars Tune puts in each trial actor's runtime env, as Tune computes them."""
    from ray.tune.execution.class_cache import DEFAULT_ENV_VARS, ENV_VARS_TO_PROPAGATE

    wanted = dict(DEFAULT_ENV_VARS)
    wanted.update({name: os.environ[name] for name in ENV_VARS_TO_PROPAGATE
                   if name in os.environ})
    return wanted


@contextlib.contextmanager
def trial_actors_without_runtime_env(workers_env: Mapping[str, str] | None) -> Iterator[None]:
    """While the block runs, Tune declares its trial actors without a runtime env where every
    worker's environment (workers_env: the raylet's; None: unknown) already holds each of
    Tune's env_vars with the same value: a worker sees what it would have seen. Otherwise, as
    Tune does."""
    from ray.tune.execution.class_cache import _ActorClassCache

    if workers_env is None:
        yield
        return
    plain: dict[Any, Any] = {}  # this block's own: Tune's cache keeps its runtime envs

    def as_inherited(original: Any) -> Any:
        def get(self: Any, trainable_cls: Any) -> Any:
            import ray

            wanted = tune_env_vars()
            if any(workers_env.get(name) != value for name, value in wanted.items()):
                return original(self, trainable_cls)
            if trainable_cls not in plain:
                plain[trainable_cls] = ray.remote(trainable_cls)
            return plain[trainable_cls]
        return get

    with replaced(_ActorClassCache, "get", as_inherited):
        yield


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    from ray._private import services
    from ray._private.parameter import RayParams
    from ray.tune.execution import class_cache

    gaps = []
    get = " ".join(source(class_cache._ActorClassCache.get).split())
    if list(inspect.signature(class_cache._ActorClassCache.get).parameters) != [
            "self", "trainable_cls"] or 'runtime_env = {"env_vars": env_vars}' not in get \
            or "ray.remote(runtime_env=runtime_env)(trainable_cls)" not in get:
        gaps.append("_ActorClassCache.get(self, trainable_cls) -> "
                    "ray.remote(runtime_env={'env_vars': ...})(trainable_cls)")
    if getattr(class_cache, "DEFAULT_ENV_VARS", None) != TUNE_DEFAULT_ENV or \
            not isinstance(getattr(class_cache, "ENV_VARS_TO_PROPAGATE", None), set):
        gaps.append(f"class_cache.DEFAULT_ENV_VARS == {TUNE_DEFAULT_ENV}, "
                    "ENV_VARS_TO_PROPAGATE (a set)")
    gaps += _agent_gaps(services, RayParams)
    return gaps


def _agent_gaps(services: Any, params: Any) -> list[str]:
    import importlib.util

    spec = importlib.util.find_spec("ray._private.runtime_env.agent.main")
    agent_main = Path(spec.origin if spec and spec.origin else "")

    start_raylet = " ".join(source(services.start_raylet).split())
    shapes = (f'"{AGENT_COMMAND}{{}}".format( subprocess.list2cmdline(runtime_env_agent_command)',
              'f"--runtime-env-agent-port={runtime_env_agent_port}"',
              'f"--runtime_env_agent_port={runtime_env_agent_port}"')
    agent = " ".join(agent_main.read_text().split()) if agent_main.is_file() else ""
    shapes_agent = ("port = args.runtime_env_agent_port or 0",
                    '"--node-ip-address",',
                    "infos = socket.getaddrinfo(args.node_ip_address, port, "
                    "type=socket.SOCK_STREAM) family, socktype, proto, _, sockaddr = infos[0]",
                    "sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)")
    if not all(shape in start_raylet for shape in shapes) or \
            not all(shape in agent for shape in shapes_agent) or \
            "runtime_env_agent_port" not in inspect.signature(params.__init__).parameters:
        return ["services.start_raylet: the runtime-env agent's port (RayParams."
                "runtime_env_agent_port, the agent binding it with SO_REUSEADDR) and "
                "--runtime_env_agent_command="]
    return []
