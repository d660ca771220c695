"""The fork server's loop (hpo.ray_adapters.fast_start.fork_server_process): a stub's request read
and judged,
a worker forked for it (hpo.ray_adapters.fast_start.fork_server_child), the worker's end reported to
the stub; the driver's orders (modules to import for the forks after, or to stop) read between.

The first fork that fails its start (os.fork failing, or a fork that ends before it registers
with its raylet: fork_server_child.FAILED_START, its stub then told to start Ray's own worker
in its place) turns forking off: every stub after is answered -1 and starts its worker as Ray
would, the workers forked already run on, and the
driver is told in one line on the notices pipe (hpo.ray_adapters.fast_start.fork_server). A
stub whose token settings are not the server's (Ray read the server's at its import) is
refused so too. Nothing of this costs a fork that starts: its end is read as before."""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import selectors
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Callable
from typing import Any

from hpo.ray_adapters.fast_start import worker_stub
from hpo.ray_adapters.fast_start.fork_server_child import FAILED_START, Request, become_worker

_INT = struct.Struct("!i")
_PEER = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid
_MAX_REQUEST = 1 << 20  # one request: the stub's arguments and environment
# Ray's C++ side reads these from the environment once, at `import ray`: a fork serves only
# workers whose values match the server's (one job's workers on one node).
PER_PROCESS = ("RAY_JOB_ID", "RAY_RAYLET_PID")
# So are Ray's token settings: a fork of a server that imported Ray without them (or with
# another token) would send the GCS none (or a wrong one), and fail its start.
AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")


class Orders:
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


class Server:
    """One selector loop: accept a stub, fork its worker, report the worker's end to it; a
    stub that goes (the raylet killed it) takes its worker along."""

    def __init__(self, listener: socket.socket, orders: Orders,
                 fresh_ids: Callable[[], bool], notices: int | None = None) -> None:
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, self._accept)
        self._selector.register(orders.fd, selectors.EVENT_READ, self._new_orders(orders))
        self._serving = True
        self._forking = True  # until a fork fails its start
        self._notices = notices  # where the driver is told that forking is off
        self._fresh_ids = fresh_ids  # whether forks would draw their own Ray IDs
        self._preload(orders.pending())  # those that came with the first

    def _new_orders(self, orders: Orders) -> Callable[[int], None]:
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
            self._serving = self._serving and self._fresh_ids()
            gc.freeze()  # as the server's own imports: shared by the forks after

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
                request = self._judged(*worker_stub.decoded(message))
        except OSError:  # the stub went
            pass
        except Exception:  # noqa: BLE001  what no stub sends (the fds are closed below)
            traceback.print_exc()
        if len(fds) != 3 or request is None:
            _refuse(conn, fds)
            return
        own_group = _group_leader(conn)
        try:
            pid = os.fork()
        except OSError as error:
            self._turn_off(f"the fork server could not fork ({error})")
            _refuse(conn, fds)
            return
        if pid == 0:
            try:
                self._close_all(conn)
                if own_group:
                    os.setpgid(0, 0)
            except BaseException:  # never back into the server's loop, in a fork
                traceback.print_exc()
                os._exit(1)
            become_worker(request, fds)
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
            if code == FAILED_START:  # its stub starts Ray's own worker in its place
                self._turn_off(f"a forked worker (pid {pid}) ended before it registered "
                               "with its raylet")
                code = worker_stub.NOT_STARTED
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

    def _judged(self, executable: str, cwd: str, args: list[str],
                env: dict[str, str]) -> Request | None:
        """_forkable's answer while forking is on; a stub of this node's job whose token
        settings are not the server's turns forking off (its forks could not reach the GCS)."""
        request = _forkable(executable, cwd, args, env) if self._forking else None
        if request is not None and any(env.get(name) != os.environ.get(name) for name in AUTH):
            self._turn_off("the fork server's Ray token settings are not its raylet's")
            return None
        return request

    def _turn_off(self, why: str) -> None:
        """Fork no more, and tell the driver why (once; not where the raylet has ended: a
        node that stops takes its starting workers down with it)."""
        if not self._forking:
            return
        self._forking = False
        if not _alive(int(os.environ.get("RAY_RAYLET_PID", "0"))):
            return
        print(f"hpo fork server: {why}; forking off", file=sys.stderr, flush=True)
        if self._notices is not None:
            with contextlib.suppress(OSError):
                os.write(self._notices, why.encode() + b"\n")

    def _close_all(self, conn: socket.socket) -> None:
        for key in list(self._selector.get_map().values()):
            _close(key.fileobj)
        self._selector.close()
        conn.close()
        if self._notices is not None:  # the driver's pipe ends with the server
            os.close(self._notices)


def _group_leader(conn: socket.socket) -> bool:
    """Whether the stub at the other end leads a process group of its own, as Ray starts a
    worker where its raylet kills the group at the worker's end: then so does the fork.
    Otherwise the fork would stay in this server's group, its driver's, which a warm node's
    raylet (not the driver's) would kill with it. Where the stub cannot be asked (it went), a
    group of the fork's own: harmless where it was not needed."""
    with contextlib.suppress(OSError):
        pid = _PEER.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size))[0]
        return os.getpgid(pid) == pid
    return True


def _refuse(conn: socket.socket, fds: list[int]) -> None:
    """Answer a stub -1 (it starts its worker as Ray would), its descriptors closed."""
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        conn.send(_INT.pack(-1))
    conn.close()


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (not ended, zombie or not)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, ValueError):
        return False
    try:
        return not select.select([pidfd], [], [], 0)[0]  # readable: ended
    finally:
        os.close(pidfd)


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
