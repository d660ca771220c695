"""Ray's `setup_worker.py` for an embedded hpo run: the raylet starts each Python worker as
`python -S <this file> <worker args>`. Where hpo's fork server runs
(hpo.ray_adapters.fast_start.fork_server)
and the worker needs nothing but a plain Python (no container, no other interpreter, no
command prefix: the server decides, with `forkable`), this asks the server for a worker
forked from a process that has Ray and Tune imported already, and lives exactly as long as
that worker (the raylet watches this process until the worker registers). Otherwise, or when
the server cannot be reached, it becomes Ray's own setup_worker.py.

Its main path imports only the interpreter's own C modules (posix and _signal built in,
_socket and _struct extensions), no Python source: it runs once per worker, its start is
what the server saves, and the standard library's socket, signal, json, re and contextlib
cost a stub 20 of its 33 ms on 2 cores.
"""

import _signal  # type: ignore[import-not-found]  # a C module typeshed has no stub for
import _socket
import _struct
import posix
import sys

SERVER_ENV = "HPO_FORK_SERVER"  # the server's socket
# In SERVER_ENV, where a node serves many jobs (a warm local Ray), each job's server has its
# own socket: the stub puts its own job (the raylet's RAY_JOB_ID) in its place.
JOB = b"{job}"
RAY_SETUP_ENV = "HPO_RAY_SETUP_WORKER"  # Ray's own setup_worker.py
_CONTEXT = "--serialized-runtime-env-context"
_INT = _struct.Struct("!i")
# The server's answer in place of a forked worker's exit code where that fork ended before it
# registered with the raylet: this stub then becomes Ray's own worker, which the raylet sees
# register as the worker it started (it waits up to 60 s for one that ends unregistered).
NOT_STARTED = -(1 << 30)
_STDIO = _struct.pack("3i", 0, 1, 2)  # SCM_RIGHTS data: this process's stdin, out, err
# Runtime-env variables that nothing the server imports reads: the fork sets them as Ray's
# setup_worker.py would. Tune gives every trial actor PL_DISABLE_FORK (read by PyTorch
# Lightning, which the server never imports; ray/tune/execution/class_cache.py), unless an
# embedded Ray's workers inherit it already (hpo.ray_adapters.fast_start.runtime_env).
READ_LATE: frozenset[str] = frozenset({"PL_DISABLE_FORK"})


def encoded(executable: str, cwd: bytes, args: list[str], environ: dict[bytes, bytes]) -> bytes:
    """A request: NUL-separated fields (no argument, path or variable holds a NUL), each the
    bytes the operating system gave (the file system's encoding, as os.fsencode)."""
    codec = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())
    fields = [*(text.encode(*codec) for text in (executable, str(len(args)), *args)), cwd,
              *(key + b"=" + value for key, value in environ.items())]
    return b"\0".join(fields)


def decoded(message: bytes) -> tuple[str, str, list[str], dict[str, str]]:
    """The executable, working directory, arguments and environment of a request."""
    import os

    executable, count, *rest = (os.fsdecode(field) for field in message.split(b"\0"))
    args, (cwd, *entries) = rest[:int(count)], rest[int(count):]
    env = dict(entry.split("=", 1) for entry in entries if "=" in entry)
    return executable, cwd, args, env


def forkable(args: list[str], env: dict[str, str] | None = None,
             executable: str = sys.executable) -> bool:
    """Whether a plain fork of this interpreter can be the worker these arguments ask for, in
    the environment `env` (this process's by default) of the stub that `executable` runs."""
    import json
    import os

    env = dict(os.environ) if env is None else env
    language = _value(args, "--language") or "PYTHON"
    context = json.loads(_value(args, _CONTEXT) or "{}")
    # Variables read when a process or a library starts (RAY_*, thread counts, the
    # allocator's, the hash seed) are fixed in the server already (it imports in the
    # raylet's environment, as the stub has it): a runtime env may only repeat them.
    changed = {name for name, value in (context.get("env_vars") or {}).items()
               if env.get(name) != _expanded(value, env)}
    return (language == "PYTHON" and changed <= READ_LATE
            and not context.get("command_prefix")
            and not context.get("override_worker_entrypoint")
            and context.get("py_executable") in (None, executable)
            and executable == sys.executable)


def _expanded(value: str, env: dict[str, str]) -> str:
    """A runtime-env value as setup_worker.py sets it (Ray's update_envs: os.path.expandvars,
    here in `env`, then any ${NAME} left unset dropped)."""
    import re

    def one(found: re.Match[str]) -> str:
        name = found[1][1:-1] if found[1].startswith("{") else found[1]
        return env.get(name, found[0])

    return re.sub(r"\$\{[A-Z0-9_]+\}", "", re.sub(r"\$(\w+|\{[^}]*\})", one, value,
                                                  flags=re.ASCII))


def _value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def _forked(server: bytes, args: list[str]) -> int | None:
    """The forked worker's exit code (as a subprocess's returncode), or None when no worker
    was forked or the fork failed its start (the caller then starts one itself)."""
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        conn.connect(server)
        request = encoded(sys.executable, posix.getcwdb(), args, posix.environ)
        conn.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, _STDIO)])
        reply = conn.recv(_INT.size)
    except OSError:
        return None
    if len(reply) != _INT.size or _INT.unpack(reply)[0] <= 0:
        return None  # no server, or not one for this worker
    pid = _INT.unpack(reply)[0]
    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(sig, lambda signum, _frame: _send(pid, signum))
    code = _exit_code(conn, pid)
    return None if code == NOT_STARTED else code


def _send(pid: int, signum: int) -> None:
    try:  # noqa: SIM105  (contextlib: 7 ms of each stub's start)
        posix.kill(pid, signum)
    except ProcessLookupError:
        pass


def _exit_code(conn: _socket.socket, pid: int) -> int:
    """Wait for the server to report the worker's end; a server gone first leaves the worker
    to its new parent, and this waits until it is gone."""
    reply = b""
    try:  # noqa: SIM105
        reply = conn.recv(_INT.size)
    except OSError:
        pass
    if len(reply) == _INT.size:
        return int(_INT.unpack(reply)[0])
    import select

    try:
        pidfd = posix.pidfd_open(pid)
    except OSError:  # gone already
        return 1
    select.select([pidfd], [], [])  # readable once the worker has exited
    return 1


def main() -> None:
    args = sys.argv[1:]
    server = posix.environ.get(SERVER_ENV.encode())
    if server:
        server = server.replace(JOB, posix.environ.get(b"RAY_JOB_ID", b"none"))
        code = _forked(server, args)
        if code is not None and code < 0:  # killed by a signal: so is the process Ray started
            _signal.signal(-code, _signal.SIG_DFL)
            posix.kill(posix.getpid(), -code)
        if code is not None:
            posix._exit(code if code >= 0 else 128 - code)
    ray_setup = posix.environ[RAY_SETUP_ENV.encode()]
    argv: list[str | bytes] = [sys.executable, ray_setup, *args]
    posix.execv(sys.executable, argv)


if __name__ == "__main__":
    main()
