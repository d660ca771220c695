"""Ray workers forked from a process that has imported what they import, for an embedded run.

A Ray worker costs about 2 CPU-s before its first trial (measured on 2 cores): Ray's
setup_worker.py imports Ray, exec's default_worker.py, which imports Ray again, and the trial
actor then imports ray.tune (pandas, pyarrow, ray.data). Tune runs a worker per concurrent
trial, so 32 trial slots cost 64 CPU-s before they all run. Here one server process
(hpo.ray_adapters.fast_start.fork_server_process) imports the libraries while Ray starts and Ray
once the node and job are known; the raylet's worker command
(hpo.ray_adapters.fast_start.worker_stub) asks it for a fork, which runs Ray's own
default_worker.py as its main, as a started worker would. A worker that needs another
interpreter, a container or a command prefix is started by Ray as before, and so is every
worker after a fork that failed its start (the run says so once: ForkServer).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from hpo.cluster import own_import
from hpo.cluster.slurm_env import usable_cores
from hpo.ray_adapters.fast_start import raylet_env, worker_stub
from hpo.ray_adapters.reading import unknown_config_keys

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
    head's worker command; HPO_RAY_PATCHES=-fork-workers (hpo.ray_adapters.gate) has Ray start
    every worker itself."""
    if not hasattr(socket, "send_fds") or \
            not _switched_on():
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))  # Linux 5.3 and later
    except (AttributeError, OSError):
        return False
    return True


def _switched_on() -> bool:
    from hpo.ray_adapters import gate  # at a run's start, not at every `hpo` command's

    return gate.switched_on("fork-workers") and gate.switched_on("lean-head")


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
        read_end, write_end = os.pipe()  # the driver's orders
        notices, told = os.pipe()  # the server's word that forking is off
        try:
            self._server = self._spawn(run_dir, env, output, [read_end, told])
        except BaseException:
            os.close(write_end)
            os.close(notices)
            raise
        finally:
            os.close(read_end)
            os.close(told)
        # What the server is told, a JSON line each: the workers' environment, then modules
        # to import for the forks made after.
        self._orders = os.fdopen(write_end, "w")
        self._preloaded: set[str] = set()
        self.forking = True  # until told to stop (preload_for), or a fork fails its start
        self.failed: str | None = None  # why forking is off, where a fork failed its start
        self.setup_worker = worker_stub.__file__  # Ray's setup_worker_path for the node
        self.env = raylet_env.stubs_env(str(self._path))  # the raylet's, for its stubs
        self._notices = threading.Thread(target=self._said_off, args=(notices,), daemon=True,
                                         name="hpo-fork-notices")
        self._notices.start()

    def _spawn(self, run_dir: Path, env: dict[str, str] | None, output: int | None,
               pipes: list[int]) -> subprocess.Popen[bytes]:
        """The server's process, given its socket, bound here, and `pipes` (the orders' read
        end, the notices' write end). Only the server holds the socket: when it ends (or
        fails), the stubs find it closed and start their workers as Ray would."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener, \
                contextlib.ExitStack() as files:
            log = output if output is not None else files.enter_context(
                open(run_dir / LOG_NAME, "ab")).fileno()
            listener.bind(str(self._path))
            listener.listen(512)
            fds = [listener.fileno(), *pipes]
            # -P: not the working folder first on the path, where a folder named hpo (a
            # clone of the project) would stand in for this hpo
            return subprocess.Popen(
                [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []),
                 "-m", "hpo.ray_adapters.fast_start.fork_server_process", *map(str, fds)],
                pass_fds=fds, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env=_found_without_cwd(env))

    def _said_off(self, notices: int) -> None:
        """The server's notices, until it ends: the first that forking is off (a fork failed
        its start: hpo.ray_adapters.fast_start.fork_server_loop) is the run's one warning line."""
        with open(notices, "rb") as lines:
            for line in lines:
                if self.failed is None:
                    self.failed = line.decode(errors="replace").strip()
                    self.forking = False
                    logging.getLogger("hpo.ray").warning(
                        "workers start as Ray starts them from now on: %s (the speed patch "
                        "fork-workers is off for this run; results are the same)", self.failed)

    def start(self, raylet_pid: int, job_id: str = FIRST_JOB, link: Path | None = None) -> None:
        """Serve the workers of a job (by default this process's, whose `ray.init` is
        starting the node) on the node whose raylet is raylet_pid, in the environment that
        raylet gives its workers. Called as soon as the raylet is started, so that the
        server imports Ray while the node comes up. `link`: where that node's stubs look for
        this job's server (a warm node's, which serves many jobs), made a symbolic link to
        this server's socket, removed at close (OSError: the raylet or that folder gone)."""
        env = raylet_env.workers_env(raylet_pid)
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
        self._notices.join(timeout=10)  # said before the run ends (its forks closed theirs)
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


def _found_without_cwd(env: dict[str, str] | None) -> dict[str, str]:
    """The server's environment, with this hpo's root on its PYTHONPATH where its -P (no
    working folder on the path) would leave it unfound: an editable install, a checkout."""
    base = dict(os.environ if env is None else env)
    return {**base, **own_import.workers_env(base)}


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


def missing() -> list[str]:
    """What this module reads of Ray's private parts that the installed Ray lacks: Ray's
    setup_worker.py beside its default_worker.py (the node's worker command and its
    raylet are set and read by hpo.ray_adapters.fast_start.lean_head.lean_head)."""
    from ray._private import ray_constants

    setup_worker = raylet_env.ray_setup_worker()
    gaps = [] if Path(setup_worker).is_file() and \
        ray_constants.SETUP_WORKER_FILENAME == raylet_env.SETUP_WORKER else [setup_worker]
    return gaps + [f"Ray config {key}" for key in unknown_config_keys(system_config())]


def forks_missing() -> list[str]:
    """What the fork server, its forks and their warm-up read that the installed Ray lacks."""
    from hpo.ray_adapters.fast_start import fork_server_child, fork_server_process, fork_server_warm

    return (missing() + fork_server_process.missing() + fork_server_child.missing()
            + fork_server_warm.missing())
