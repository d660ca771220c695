"""Ray workers forked from a process that has imported what they import, for an embedded run.

A Ray worker costs about 2 CPU-s before its first trial (measured on 2 cores): Ray's
setup_worker.py imports Ray, exec's default_worker.py, which imports Ray again, and the trial
actor then imports ray.tune (pandas, pyarrow, ray.data). Tune runs a worker per concurrent
trial, so 32 trial slots cost 64 CPU-s before they all run. Here one server process
(hpo.ray_adapters.fast_start.fork_server_process) imports the libraries while Ray starts and Ray
once the node
and job are known; the raylet's worker command (hpo.ray_adapters.fast_start.worker_stub) asks it
for a fork,
which runs Ray's own default_worker.py as its main, as a started worker would. A worker that
needs another interpreter, a container or a command prefix is started by Ray as before.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import inspect
import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from hpo.cluster.slurm_env import usable_cores
from hpo.ray_adapters import gate
from hpo.ray_adapters.fast_start import worker_stub
from hpo.ray_adapters.source import unknown_config_keys

SETUP_WORKER = "setup_worker.py"  # ray._private.ray_constants.SETUP_WORKER_FILENAME
SOCKET_NAME = "fork.sock"  # in the run's (or node's) private folder
LOG_NAME = "fork_server.log"  # the server's own output (its forks' goes to their stubs')

# Workers that start at once, for each core (the raylet's, and Tune's trial actors: hpo's
# start cap). A forked worker's start is mostly round trips (raylet, fork server, GCS) and
# about 0.1 CPU-s: at Ray's one a core, 64 workers took 4.5 s to come up on 2 cores with
# the cores a fifth idle; at four, 3.4 s (docs/benchmarks.md).
STARTS_PER_CORE = 4


# Ray's default workers started with a node, before any job, carry no job: none is needed
# where forks are cheap, and they could not be forked. A cluster's head sets these for all.
NO_PRESTART = {"prestart_worker_first_driver": False, "enable_worker_prestart": False}


def system_config() -> dict[str, Any]:
    """The `_system_config` of a one-node Ray whose workers are forked (for a cluster of
    several nodes, NO_PRESTART only: the head's cores say nothing of the others')."""
    return {**NO_PRESTART, "worker_maximum_startup_concurrency": STARTS_PER_CORE * usable_cores()}

# Libraries a trainable may import that cost each worker a second or more, and that a fork
# inherits safely while unused (torch initialises CUDA and its thread pools on first use).
HEAVY = ("torch",)

# The first job a fresh node's GCS registers: the driver of the `ray.init` that starts it. A
# wrong guess costs only speed: the server forks no worker of another job.
FIRST_JOB = "01000000"


def available() -> bool:
    """Forking workers needs Linux's pidfds and fd passing over Unix sockets, and the lean
    head's worker command; HPO_FORK_WORKERS=0 (or HPO_RAY_PATCHES, hpo.ray_adapters.gate) has
    Ray start every worker itself."""
    if os.environ.get("HPO_FORK_WORKERS", "1") == "0" or not hasattr(socket, "send_fds") or \
            not (gate.switched_on("fork-workers") and gate.switched_on("lean-head")):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))  # Linux 5.3 and later
    except (AttributeError, OSError):
        return False
    return True


def imported_with(trainable: Any) -> list[str]:
    """The HEAVY libraries a fresh worker imports with the trainable itself: those its module
    holds, when that module is imported by name in the worker (any but __main__), and those
    its function's code names (cloudpickle sends them by reference with a function it copies).
    Others may come with the first trial: not preloaded, since a worker could tell (hpo saves a
    trial's state with torch only where torch is loaded)."""
    target = inspect.unwrap(trainable)
    held: list[Any] = []
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    if module is not None and module.__name__ != "__main__":
        held += vars(module).values()
    code, names = getattr(target, "__code__", None), getattr(target, "__globals__", {})
    if code is not None:
        held += [names[name] for name in code.co_names if name in names]
    roots = {value.__name__.split(".")[0] for value in held if isinstance(value, ModuleType)}
    return [name for name in HEAVY if name in roots]


class ForkServer:
    """The server of one node's workers. Its socket is bound before the node starts, so
    that every worker of the node queues for it; the server itself starts once the node and
    the job are known (`start`)."""

    def __init__(self, run_dir: Path, env: dict[str, str] | None = None,
                 output: int | None = None) -> None:
        self._path = run_dir / SOCKET_NAME
        self._link: Path | None = None
        self._own_log = run_dir / LOG_NAME if output is None else None
        self._reported = 0  # of its own log, in bytes
        read_end, write_end = os.pipe()
        # Only the server holds the socket: when it ends (or fails), the stubs find it closed
        # and start their workers as Ray would.
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener, \
                    contextlib.ExitStack() as files:
                log = output if output is not None else files.enter_context(
                    open(run_dir / LOG_NAME, "ab")).fileno()
                listener.bind(str(self._path))
                listener.listen(512)
                fds = [listener.fileno(), read_end]
                self._server = subprocess.Popen(
                    [sys.executable, "-m", "hpo.ray_adapters.fast_start.fork_server_process",
                     *map(str, fds)],
                    pass_fds=fds, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        # What the server is told, a JSON line each: the workers' environment, then modules
        # to import for the forks made after.
        self._orders = os.fdopen(write_end, "w")
        self._preloaded: set[str] = set()
        self.forking = True  # until told to stop (preload_for)
        self.setup_worker = worker_stub.__file__  # Ray's setup_worker_path for the node
        self.env = stubs_env(str(self._path))  # for the raylet's environment while it starts

    def start(self, raylet_pid: int, job_id: str = FIRST_JOB, link: Path | None = None) -> None:
        """Serve the workers of a job (by default this process's, whose `ray.init` is
        starting the node) on the node whose raylet is raylet_pid, in the environment that
        raylet gives its workers. Called as soon as the raylet is started, so that the
        server imports Ray while the node comes up. `link`: where that node's stubs look for
        this job's server (a warm node's, which serves many jobs), made a symbolic link to
        this server's socket, removed at close (OSError: the raylet or that folder gone)."""
        env = workers_env(raylet_pid)
        env.update(RAY_JOB_ID=job_id, RAY_RAYLET_PID=str(raylet_pid))
        self._tell(env)
        if link is not None:
            self._link = link  # first: an interrupted link is still removed at close
            link.symlink_to(self._path)

    def preload_for(self, trainable: Any) -> None:
        """Have the server import the heavy libraries a fresh worker imports with this
        trainable before any trial code runs (a torch trainable's torch: about 1 s of each
        worker's start), for the forks it makes after: a worker sees what it would have seen.
        A kept Ray's next run with a trainable that imports less stops the forks."""
        self.preload(imported_with(trainable))

    def preload(self, names: list[str]) -> None:
        """preload_for, with the HEAVY libraries a fresh worker would import (others are
        not imported)."""
        wanted = set(names) & set(HEAVY)
        if self._preloaded - wanted:
            self._tell(None)
            self.forking = False
        elif wanted - self._preloaded:
            self._tell(sorted(wanted - self._preloaded))
        self._preloaded |= wanted

    def _tell(self, order: object) -> None:
        with contextlib.suppress(BrokenPipeError, ValueError):  # the server gone (or told
            self._orders.write(json.dumps(order) + "\n")  # to end): the stubs start their
            self._orders.flush()  # workers as Ray does

    def close(self) -> None:
        if self._link is not None:  # first: no stub of this job queues for it any more
            self._link.unlink(missing_ok=True)
        with contextlib.suppress(BrokenPipeError):
            self._orders.close()  # before its start: the server ends
        self._server.terminate()
        try:
            self._server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        self.report()

    def report(self, limit: int = 1 << 16) -> None:
        """Log what the server wrote to its own log since the last report (an error: a failed
        preload, "not forking"; at most its last `limit` bytes) as hpo.forks's warning, which
        the run's log (hpo.log) takes: its own log goes with the run's private folder."""
        if self._own_log is None:
            return
        try:
            with open(self._own_log, "rb") as log:
                end = log.seek(0, os.SEEK_END)
                log.seek(max(self._reported, end - limit))
                written = log.read(end - log.tell()).decode(errors="replace").strip()
        except OSError:
            return
        self._reported = end
        if written:
            logging.getLogger("hpo.forks").warning("the workers' fork server wrote:\n%s", written)


def stubs_env(socket_path: str) -> dict[str, str]:
    """What a node's raylet is given in its environment for the stubs it starts (each
    inherits it): where the fork server's socket is (with worker_stub.JOB for a warm node's
    per-job servers), and Ray's own setup_worker.py for a worker the server does not fork."""
    return {worker_stub.SERVER_ENV: socket_path, worker_stub.RAY_SETUP_ENV: _ray_setup_worker()}


def workers_env(raylet_pid: int) -> dict[str, str]:
    """The environment a raylet's workers start in: the raylet's own, but Ray's allocator
    (LD_PRELOAD, for the raylet alone)."""
    env = environ_of(raylet_pid)
    env.pop("LD_PRELOAD", None)
    return env


def environ_of(pid: int) -> dict[str, str]:
    """The environment process `pid` was started with (/proc/<pid>/environ)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)
    return {os.fsdecode(key): os.fsdecode(value) for key, value in pairs}


@contextlib.contextmanager
def serving(run_dir: Path, env: dict[str, str] | None = None,
            output: int | None = None) -> Iterator[ForkServer | None]:
    """A fork server for the node this process is about to start (None where forks are not
    available), started in `env` (by default this process's), its own output written to the
    file descriptor `output` (by default appended to LOG_NAME in run_dir); stopped after."""
    if not available():
        yield None
        return
    try:
        server = ForkServer(run_dir, env, output)
    except OSError as error:  # seen once on CI: Popen's exec failed with EFAULT
        logging.getLogger(__name__).warning(
            "workers start as Ray starts them: the fork server did not start (%s)", error)
        server = None
    if server is None:  # outside the except: the block's own errors are not chained to it
        yield None
        return
    try:
        yield server
    finally:
        server.close()


# The run folder and fork server that start_ahead made for the next embedded Ray of this
# process, with the stack that ends them, until that Ray's start takes them.
_ahead: tuple[contextlib.ExitStack, Path, ForkServer | None] | None = None


def start_ahead(env: dict[str, str] | None = None) -> None:
    """Make the run folder and start the fork server now (in `env`: by default this
    process's), before `hpo run` imports what it needs: the server's own imports (numpy,
    pandas, pyarrow: about 0.8 CPU-s) then use the core the driver's imports leave idle,
    instead of coming after them (on 2 cores the first trial waited for the server). The next
    Ray's start (or a warm Ray's run) takes them (taken_ahead); untaken, they end with the
    process. A folder that cannot be made leaves nothing ahead: the start makes its own."""
    global _ahead
    if _ahead is not None or not available():
        return
    from hpo.cluster.run_dir import private_run_dir

    stack = contextlib.ExitStack()
    try:
        run_dir = stack.enter_context(private_run_dir())
        server = stack.enter_context(serving(run_dir, env))
    except OSError:  # the start meets it again, and says so where it must
        stack.close()
        return
    except BaseException:
        stack.close()
        raise
    _ahead = (stack, run_dir, server)
    atexit.register(end_ahead)


def taken_ahead() -> tuple[contextlib.ExitStack, Path, ForkServer | None] | None:
    """What start_ahead made, from now on the caller's to end (None: nothing ahead)."""
    global _ahead
    ahead, _ahead = _ahead, None
    return ahead


def end_ahead() -> None:
    """End what start_ahead made, unless a Ray's start has taken it."""
    ahead = taken_ahead()
    if ahead is not None:
        ahead[0].close()


def _ray_setup_worker() -> str:
    """Ray's setup_worker.py, beside its default_worker.py in ray/_private/workers/, found
    without importing Ray: `hpo run` starts the server before hpo.driver.ray_session imports
    Ray, local-only (loopback), beside the server's own imports."""
    spec = importlib.util.find_spec("ray")
    places = spec.submodule_search_locations if spec is not None else None
    root = Path(places[0]) if places else Path("ray")
    return str(root / "_private" / "workers" / SETUP_WORKER)


def missing() -> list[str]:
    """What this module reads of Ray's private parts that the installed Ray lacks: Ray's
    setup_worker.py beside its default_worker.py (the node's worker command and its
    raylet are set and read by hpo.ray_adapters.fast_start.lean_head.lean_head)."""
    from ray._private import ray_constants

    gaps = [] if Path(_ray_setup_worker()).is_file() and \
        ray_constants.SETUP_WORKER_FILENAME == SETUP_WORKER else [_ray_setup_worker()]
    return gaps + [f"Ray config {key}" for key in unknown_config_keys(system_config())]


def forks_missing() -> list[str]:
    """What the fork server, its forks and their warm-up read that the installed Ray lacks."""
    from hpo.ray_adapters.fast_start import fork_server_child, fork_server_process, fork_server_warm

    return (missing() + fork_server_process.missing() + fork_server_child.missing()
            + fork_server_warm.missing())
