"""The embedded Ray's runtime-env agent, started only once something asks for a runtime env
(hpo.ray_adapters.fast_start.runtime_env): the raylet's agent command is

    python -S <this file> PORT <the agent's own command>

which listens on PORT, the agent's (hpo's driver holds it for the agent, never listening),
until the raylet connects to ask, then lets the port go and becomes the agent (exec: the same
process, which the raylet watches), at the raylet's own priority. The raylet's agent client
(src/ray/raylet/runtime_env_agent_client.cc) retries a refused connection (NotFound) and a
reset one (Disconnected) every agent_manager_retry_interval_ms (1 s) until the agent answers,
for agent_register_timeout_ms (30 s) from the first ask: so the first runtime env asked waits
1-2 s more than with an agent started ahead (tests/driver/test_runtime_env_private.py asks
one of the installed Ray). Where it cannot listen, it becomes the agent at once; it ends
where the raylet has ended.

An agent started at once at nice 19 starves behind any busy process on the node, and the
raylet gives up on an agent that has not answered 30 s after it was first asked, and exits,
ending the run. An agent started at once at nice 0 imports Ray: 0.7 CPU-s taken on the way
to the first trial (util32's first trial starts 0.35 s later) or later in the run (util32's
utilisation 0.01 lower at 10 s; util32 is described in docs/design-decisions.md), for an
agent that a run whose trials inherit Tune's variables never asks anything.

It imports only the interpreter's own C modules, as hpo.ray_adapters.fast_start.worker_stub does.
"""

import _socket
import posix
import select
import sys

LOOK_MS = 500  # how often it looks whether the raylet still runs
_ADDRESS = "--node-ip-address="  # the agent's argument: the address it binds
_RAYLET = b"RAY_RAYLET_PID"  # the raylet's pid, which it gives its agents (and workers)


def listening(command: list[str], port: int) -> _socket.socket | None:
    """A socket listening where the agent `command` will (its node's address, `port`), None
    where it cannot."""
    address = next((arg[len(_ADDRESS):] for arg in command if arg.startswith(_ADDRESS)), None)
    if address is None:
        return None
    try:  # the agent's own look-up (as bytes: a str would import the idna codec, in Python)
        family, kind, proto, _, where = _socket.getaddrinfo(address.encode(), port, 0,
                                                            _socket.SOCK_STREAM)[0]
        listener = _socket.socket(family, kind, proto)  # closed by the exec (not inheritable)
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind(where)
        listener.listen(64)
    except OSError:
        return None
    return listener


def asked(listener: _socket.socket, raylet: int) -> bool:
    """Wait until a connection comes (True), or the raylet has ended (False): this process
    is the raylet's child until then, and its orphans go to another parent."""
    looks = select.poll()
    looks.register(listener.fileno(), select.POLLIN)
    while posix.getppid() == raylet:
        if looks.poll(LOOK_MS):
            return True
    return False


def main(argv: list[str]) -> None:
    raylet = int(posix.environ.get(_RAYLET, b"0")) or posix.getppid()
    port, command = int(argv[0]), argv[1:]
    listener = listening(command, port)
    if listener is not None:
        called = asked(listener, raylet)
        listener.close()  # the caller's connection is reset: the raylet asks again
        if not called:
            return
    posix.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
