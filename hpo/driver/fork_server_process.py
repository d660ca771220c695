"""The fork server's own process (started by hpo.driver.fork_server): it imports what every
worker imports, once, then forks a worker for each stub that asks (hpo.driver.worker_stub).

A fork is what a fresh worker would be: the environment, working directory and stdio of the
process the raylet started, Ray's runtime-env variables applied as setup_worker.py applies
them, SIGINT blocked as in Ray's processes, and the random generators that would have been
seeded afresh (Python's own reseeds at fork; NumPy's global one is reseeded here). Nothing in
the server uses a CUDA device or a connection before it forks. What forks share that fresh
workers would not: the interpreter's string hash seed (the order of a set of strings), the
modules the server imported (those a worker imports anyway before its first trial), and
what hpo.driver.fork_server_warm did once for all (the worker script's code, compiled; the
regular expressions Ray's worker compiles, in `re`'s cache).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from hpo.driver import fork_server_warm, worker_stub

RAY_VERSION = "2.60.0"  # the version the reaches below were read from (see missing())

# What every trial's worker imports: the libraries Tune imports (0.8 CPU-s on 2 cores),
# first, while Ray starts; then, once the node and job are known, Ray's worker main, Tune
# (0.3-0.5 CPU-s more) and hpo's trial wrapper. Not the user's trainable: it may touch a GPU.
LIBRARIES = ("numpy", "pandas", "pyarrow", "pyarrow.fs", "pydantic", "fsspec", "rich")
RAY_MODULES = ("ray._private.workers.default_worker", "ray.tune", "hpo.trial.one_process")
# What a trial's worker imports after that before its first step, where installed (about
# 0.2 CPU-s): Tune's trainable clears IPython's shell, Ray's serializers register pydantic
# v1's and starlette's types, hpo's result batches, the fork's own argument parser; and at
# its exit: ray.shutdown imports Ray's compiled DAGs to close them (24 ms a worker, all of
# them at once at a run's end).
WORKER_EXTRAS = ("IPython.core.interactiveshell", "pydantic.v1", "starlette.datastructures",
                 "pyarrow.json", "ray._private.arrow_serialization", "hpo.trial.batched",
                 "ray._private.workers.setup_worker", "ray.dag.compiled_dag_node")
_INT = struct.Struct("!i")
_PEER = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid
_MAX_REQUEST = 1 << 20  # one request: the stub's arguments and environment
# Ray's C++ side reads these from the environment once, at `import ray`: a fork serves only
# workers whose values match the server's (one job's workers on one node).
PER_PROCESS = ("RAY_JOB_ID", "RAY_RAYLET_PID")


class Request(NamedTuple):
    """What a stub asks for: the worker's working directory, arguments and environment."""

    cwd: str
    args: list[str]
    env: dict[str, str]


class _Orders:
    """The driver's JSON lines on a pipe, read without a buffer the selector cannot see."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._pending = b""

    def read(self) -> list[str] | None:
        """The whole lines the pipe has (None at its end)."""
        data = os.read(self.fd, 1 << 20)
        if not data:
            return None
        self._pending += data
        return self.pending()

    def pending(self) -> list[str]:
        """The whole lines read already, taken."""
        *lines, self._pending = self._pending.split(b"\n")
        return [line.decode() for line in lines]

    def first(self) -> str:
        """The first line, waiting for it ("" when the pipe ends first); the lines after it
        stay pending."""
        while b"\n" not in self._pending:
            data = os.read(self.fd, 1 << 20)
            if not data:
                return ""
            self._pending += data
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()


class _Server:
    """One selector loop: accept a stub, fork its worker, report the worker's end to it; a
    stub that goes (the raylet killed it) takes its worker along."""

    def __init__(self, listener: socket.socket, orders: _Orders) -> None:
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, self._accept)
        self._selector.register(orders.fd, selectors.EVENT_READ, self._new_orders(orders))
        self._serving = True
        self._preload(orders.pending())  # those that came with the first

    def _new_orders(self, orders: _Orders) -> Callable[[int], None]:
        def read(fd: int) -> None:
            lines = orders.read()
            if lines is None:
                self._selector.unregister(fd)
            else:
                self._preload(lines)
        return read

    def _preload(self, lines: list[str]) -> None:
        """Import the modules the driver names, unless that would make forks share Ray's
        random IDs: then stop forking, as on the driver's order to stop (null)."""
        orders_given = [json.loads(line) for line in lines]
        if None in orders_given:  # a worker must not see what an earlier run preloaded
            self._serving = False
            return
        for name in (name for order in orders_given for name in order):
            try:
                importlib.import_module(name)
            except Exception:  # the worker imports it itself, and reports its error
                traceback.print_exc()
        if orders_given:
            self._serving = self._serving and _fresh_ray_ids()

    def run(self, parent: int) -> None:
        while self._serving and os.getppid() == parent:  # the driver gone: nothing to serve
            for key, _ in self._selector.select(timeout=1.0):
                try:
                    key.data(key.fileobj)
                except Exception:  # one stub's trouble is not the others'
                    traceback.print_exc()

    def _accept(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        self._selector.register(conn, selectors.EVENT_READ, self._request)

    def _request(self, conn: socket.socket) -> None:
        self._selector.unregister(conn)
        fds: list[int] = []
        request: Request | None = None
        try:
            message, fds, flags, _ = socket.recv_fds(conn, _MAX_REQUEST, 3)
            if not flags & socket.MSG_TRUNC:
                request = _forkable(*worker_stub.decoded(message))
        except OSError:  # the stub went
            pass
        except Exception:  # noqa: BLE001  what no stub sends (the fds are closed below)
            traceback.print_exc()
        if len(fds) != 3 or request is None:
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                conn.send(_INT.pack(-1))  # the stub starts it as Ray would
            conn.close()
            return
        own_group = _group_leader(conn)
        pid = os.fork()
        if pid == 0:
            self._close_all(conn)
            if own_group:
                os.setpgid(0, 0)
            _become_worker(request, fds)
        for fd in fds:
            os.close(fd)
        self._selector.register(os.pidfd_open(pid), selectors.EVENT_READ, self._ended(pid, conn))
        try:
            conn.send(_INT.pack(pid))
        except OSError:  # the stub went meanwhile: so does its worker
            self._stub_gone(pid)(conn, registered=False)
            return
        self._selector.register(conn, selectors.EVENT_READ, self._stub_gone(pid))

    def _ended(self, pid: int, conn: socket.socket) -> Callable[[int], None]:
        def ended(pidfd: int) -> None:
            self._selector.unregister(pidfd)
            os.close(pidfd)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            if conn.fileno() >= 0:  # the stub still waits
                self._selector.unregister(conn)
                with contextlib.suppress(OSError):
                    conn.send(_INT.pack(code))
                conn.close()
        return ended

    def _stub_gone(self, pid: int) -> Callable[..., None]:
        def gone(conn: socket.socket, registered: bool = True) -> None:
            if conn.fileno() < 0:  # the worker's end was handled first
                return
            if registered:
                self._selector.unregister(conn)
            conn.close()
            with contextlib.suppress(ProcessLookupError):  # the raylet killed the stub:
                os.kill(pid, signal.SIGKILL)  # its worker goes too, as Ray expects
        return gone

    def _close_all(self, conn: socket.socket) -> None:
        for key in list(self._selector.get_map().values()):
            _close(key.fileobj)
        self._selector.close()
        conn.close()


def _group_leader(conn: socket.socket) -> bool:
    """Whether the stub at the other end leads a process group of its own, as Ray starts a
    worker where its raylet kills the group at the worker's end: then so does the fork.
    Otherwise the fork would stay in this server's group, its driver's, which a warm node's
    raylet (not the driver's) would kill with it."""
    with contextlib.suppress(OSError):
        pid = _PEER.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size))[0]
        return os.getpgid(pid) == pid
    return False


def _close(fileobj: Any) -> None:
    if isinstance(fileobj, int):
        os.close(fileobj)
    else:
        fileobj.close()


def _forkable(executable: str, cwd: str, args: list[str], env: dict[str, str]) -> Request | None:
    """The worker a stub asks for, where a fork of this server can be it: a plain Python
    worker of this node's job (worker_stub.forkable), else None."""
    if any(env.get(name) != os.environ.get(name) for name in PER_PROCESS):
        return None
    if not worker_stub.forkable(args, env, executable):
        return None
    return Request(cwd, args, env)


def _become_worker(request: Request, fds: list[int]) -> NoReturn:
    """In the fork: turn into the worker the stub's arguments describe; never returns."""
    code: Any = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(request.env)
        sys.argv = _as_setup_worker(request.args)
        _fresh_state()
        code = 0
        fork_server_warm.run_as_main(sys.argv[0])
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
    _exit(code)


def _as_setup_worker(args: list[str]) -> list[str]:
    """Do what setup_worker.py does before its exec: parse its own arguments off with its own
    parser and set the runtime env's variables (only those the stub lets through:
    hpo.driver.worker_stub.READ_LATE, or repeated values); return what it would exec, the
    interpreter flags dropped (this one has them)."""
    from ray._private.runtime_env.context import RuntimeEnvContext
    from ray._private.utils import update_envs
    from ray._private.workers.setup_worker import parser

    known, rest = parser.parse_known_args(args)
    update_envs(RuntimeEnvContext.deserialize(known.serialized_runtime_env_context or "{}")
                .env_vars)
    while rest and rest[0] in ("-S", "-s"):
        rest.pop(0)
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    return rest


def _fresh_state() -> None:
    """What a new process would have fresh and a fork shares with its siblings."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()  # the global generator, seeded from the OS as at import


def _exit(code: Any) -> NoReturn:
    """Exit as the interpreter would (atexit hooks, flushed stdio), without unwinding into
    the server's frames."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code if isinstance(code, int) else int(code is not None))


def main(listener_fd: int, orders_fd: int) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # as Ray's own processes
    parent = os.getppid()
    listener = socket.socket(fileno=listener_fd)
    for name in LIBRARIES:
        importlib.import_module(name)
    orders = _Orders(orders_fd)
    env = json.loads(orders.first() or "{}")
    if not env:
        return  # the node did not start
    os.environ.clear()
    os.environ.update(env)  # Ray's C++ side reads it once, at `import ray`
    with _unseeded_actor_ids():
        for name in RAY_MODULES:
            importlib.import_module(name)
        for name in WORKER_EXTRAS:
            try:
                importlib.import_module(name)
            except ImportError:  # the worker would not have it either
                pass
            except Exception:  # the worker imports it itself, and meets the error there
                traceback.print_exc()
    try:  # what each worker would redo, once (a failure costs only that time)
        fork_server_warm.prepare()
    except Exception:  # noqa: BLE001  the workers compile for themselves, as without it
        traceback.print_exc()
    if not _fresh_ray_ids():
        print("hpo fork server: forks would share Ray's random IDs; not forking",
              file=sys.stderr, flush=True)
        return  # the stubs find the socket closed and start their workers as Ray does
    gc.collect()
    gc.freeze()  # the forks share these pages instead of copying them at their first GC
    _Server(listener, orders).run(parent)


@contextlib.contextmanager
def _unseeded_actor_ids() -> Iterator[None]:
    """While the block runs, a Ray actor class declared (as importing Tune does) takes its
    ID from os.urandom instead of Ray's C++ generator, whose first draw seeds it once per
    process: a fork would share the seed, and draw the same object IDs as its siblings. The
    class ID is only kept in the class's metadata (read by nothing in Ray 2.60)."""
    import ray.actor
    from ray._raylet import ActorClassID

    class _FromUrandom:
        @staticmethod
        def from_random() -> Any:
            return ActorClassID(os.urandom(ActorClassID.size()))

    ray.actor.ActorClassID = _FromUrandom  # type: ignore[misc, assignment]
    try:
        yield
    finally:
        ray.actor.ActorClassID = ActorClassID  # type: ignore[misc]


def _fresh_ray_ids() -> bool:
    """Whether two forks draw different random Ray IDs (each seeds its own generator)."""
    from ray._raylet import ObjectID

    drawn = []
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, ObjectID.from_random().binary())
            os._exit(0)
        os.close(write)
        with open(read, "rb") as drawn_id:
            drawn.append(drawn_id.read())
        os.waitpid(pid, 0)
    return drawn[0] != drawn[1]


def missing() -> list[str]:
    """What the forks read of Ray's private parts that the installed Ray lacks: the worker's
    main, setup_worker.py's parser and runtime-env context, where an actor class draws its
    ID, the per-process flags."""
    import inspect

    import ray.actor
    from ray._private import ray_constants
    from ray._private.runtime_env.context import RuntimeEnvContext
    from ray._private.workers import default_worker, setup_worker

    gaps = []
    if "ray._private.worker.connect(" not in Path(default_worker.__file__).read_text():
        gaps.append(default_worker.__file__)
    if "--serialized-runtime-env-context" not in setup_worker.parser.format_usage():
        gaps.append("setup_worker.parser(--serialized-runtime-env-context)")
    fields = set(vars(RuntimeEnvContext()))
    if not {"command_prefix", "env_vars", "py_executable", "override_worker_entrypoint"} <= fields:
        gaps.append("RuntimeEnvContext fields")
    if "update_envs(self.env_vars)" not in inspect.getsource(RuntimeEnvContext.exec_worker):
        gaps.append("RuntimeEnvContext.exec_worker(update_envs)")
    if "ActorClassID.from_random()" not in inspect.getsource(ray.actor._make_actor):
        gaps.append("ray.actor._make_actor(ActorClassID.from_random())")
    if not set(PER_PROCESS) <= set(ray_constants.RAY_INTERNAL_FLAGS):
        gaps.append("ray_constants.RAY_INTERNAL_FLAGS")
    return gaps


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
