"""Ray's `setup_worker.py` for an embedded hpo run: the raylet starts each Python worker as
`python <this file> <worker args>`. Where hpo's fork server runs (hpo.driver.fork_server)
and the worker needs nothing but a plain Python (no container, no other interpreter, no
command prefix), this asks the server for a worker forked from a process that has Ray and
Tune imported already, and lives exactly as long as that worker (the raylet watches this
process until the worker registers). Otherwise, or when the server cannot be reached, it
becomes Ray's own setup_worker.py.

Standard library only, and no import of hpo: this runs once per worker, and its start is
what the server saves.
"""

import contextlib
import json
import os
import re
import select
import signal
import socket
import struct
import sys

SERVER_ENV = "HPO_FORK_SERVER"  # the server's socket
RAY_SETUP_ENV = "HPO_RAY_SETUP_WORKER"  # Ray's own setup_worker.py
_CONTEXT = "--serialized-runtime-env-context"
_INT = struct.Struct("!i")
# Runtime-env variables that nothing the server imports reads: the fork sets them as Ray's
# setup_worker.py would. Tune gives every trial actor PL_DISABLE_FORK (read by PyTorch
# Lightning, which the server never imports; ray/tune/execution/class_cache.py).
READ_LATE: frozenset[str] = frozenset({"PL_DISABLE_FORK"})


def forkable(args: list[str]) -> bool:
    """Whether a plain fork of this interpreter can be the worker these arguments ask for."""
    language = _value(args, "--language") or "PYTHON"
    context = json.loads(_value(args, _CONTEXT) or "{}")
    # Variables read when a process or a library starts (RAY_*, thread counts, the
    # allocator's, the hash seed) are fixed in the server already (it has the raylet's
    # environment, as this process has): a runtime env may only repeat them.
    changed = {name for name, value in (context.get("env_vars") or {}).items()
               if os.environ.get(name) != _expanded(value)}
    return (language == "PYTHON" and changed <= READ_LATE
            and not context.get("command_prefix")
            and not context.get("override_worker_entrypoint")
            and context.get("py_executable") in (None, sys.executable))


def _expanded(value: str) -> str:
    """A runtime-env value as setup_worker.py sets it (Ray's update_envs)."""
    return re.sub(r"\$\{[A-Z0-9_]+\}", "", os.path.expandvars(value))


def _value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def _forked(server: str, args: list[str]) -> int | None:
    """The forked worker's exit code (as a subprocess's returncode), or None when no worker
    was forked (the caller then starts one itself)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(server)
        request = {"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        reply = conn.recv(_INT.size)
    except OSError:
        return None
    if len(reply) != _INT.size or _INT.unpack(reply)[0] <= 0:
        return None  # no server, or not one for this worker
    pid = _INT.unpack(reply)[0]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: _send(pid, signum))
    return _exit_code(conn, pid)


def _send(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _exit_code(conn: socket.socket, pid: int) -> int:
    """Wait for the server to report the worker's end; a server gone first leaves the worker
    to its new parent, and this waits until it is gone."""
    reply = b""
    with contextlib.suppress(OSError):
        reply = conn.recv(_INT.size)
    if len(reply) == _INT.size:
        return int(_INT.unpack(reply)[0])
    with contextlib.suppress(OSError):  # gone already
        pidfd = os.pidfd_open(pid)
        select.select([pidfd], [], [])  # readable once the worker has exited
    return 1


def main() -> None:
    args = sys.argv[1:]
    server = os.environ.get(SERVER_ENV)
    if server and forkable(args):
        code = _forked(server, args)
        if code is not None and code < 0:  # killed by a signal: so is the process Ray started
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        if code is not None:
            os._exit(code if code >= 0 else 128 - code)
    ray_setup = os.environ[RAY_SETUP_ENV]
    os.execv(sys.executable, [sys.executable, ray_setup, *args])


if __name__ == "__main__":
    main()
