"""The embedded Ray's runtime-env agent off the way to the first trial: Tune's
trial actors carry no runtime env where every worker inherits its env_vars, the raylet is told
the agent's port ahead, and the agent starts once asked, at the driver's priority
(hpo.ray_adapters.fast_start.runtime_env, hpo.ray_adapters.fast_start.agent_gate)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from hpo.cluster.node import descendants
from hpo.driver.backends.ray_session import embedded_ray
from hpo.ray_adapters.fast_start import agent_gate
from hpo.ray_adapters.fast_start.runtime_env import (
    AGENT_COMMAND,
    TUNE_DEFAULT_ENV,
    gated_agent,
    reserved_port,
    trial_actors_without_runtime_env,
    tune_env_vars,
    workers_environ,
)

pytestmark = pytest.mark.usefixtures("speed_patches_on")  # tests a speed patch itself


class _Trainable:
    pass


def _declared_runtime_env(workers_env: dict[str, str] | None) -> Any:
    from ray.tune.execution.class_cache import _ActorClassCache

    with trial_actors_without_runtime_env(workers_env):
        declared = _ActorClassCache().get(_Trainable)
    return declared._default_options.get("runtime_env")


def test_trial_actors_carry_no_runtime_env_only_where_workers_inherit_tunes_env_vars(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.tune.execution.class_cache import ENV_VARS_TO_PROPAGATE

    for name in ENV_VARS_TO_PROPAGATE:  # Tune would propagate the driver's value
        monkeypatch.delenv(name, raising=False)
    inherits = {**TUNE_DEFAULT_ENV, "OTHER": "x"}
    assert tune_env_vars() == TUNE_DEFAULT_ENV
    assert _declared_runtime_env(inherits) is None
    assert _declared_runtime_env({}) == {"env_vars": TUNE_DEFAULT_ENV}
    assert _declared_runtime_env(None) == {"env_vars": TUNE_DEFAULT_ENV}
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "driver's")  # Tune propagates it to its trials
    assert _declared_runtime_env(inherits) == {
        "env_vars": {**TUNE_DEFAULT_ENV, "AWS_ACCESS_KEY_ID": "driver's"}}
    assert _declared_runtime_env({**inherits, "AWS_ACCESS_KEY_ID": "driver's"}) is None
    assert _declared_runtime_env({**inherits, "AWS_ACCESS_KEY_ID": "other"}) is not None


def test_only_the_runtime_env_agents_command_goes_through_the_gate() -> None:
    command = f"{AGENT_COMMAND}/py -u /ray/agent/main.py --node-id=ab"
    gate = subprocess.list2cmdline([sys.executable, "-S", agent_gate.__file__, "4321"])
    assert gated_agent(command, 4321) == \
        f"{AGENT_COMMAND}{gate} /py -u /ray/agent/main.py --node-id=ab"
    for other in ("--dashboard_agent_command=/py agent.py", "--head",
                  "--python_worker_command=/py setup_worker.py"):
        assert gated_agent(other, 4321) == other


# An agent's stand-in: it says which process it is, at which priority.
_AGENT = ("import os; print('agent', os.getpid(), os.getpriority(os.PRIO_PROCESS, 0), "
          "flush=True)")


def _gate(port: int, *agent_args: str) -> list[str]:
    return [sys.executable, "-S", agent_gate.__file__, str(port),
            sys.executable, "-c", _AGENT, *agent_args]


def _as_a_raylet_starts_it(parent: int) -> dict[str, str]:
    """The environment a raylet gives its agent: its own pid in RAY_RAYLET_PID."""
    return {**os.environ, "RAY_RAYLET_PID": str(parent)}


def _listening(port: int, timeout_s: float = 60.0) -> bool:
    """Whether a socket listens on `port` (within timeout_s), read from /proc, never by
    connecting (which is what starts the agent)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
        if any(int(row[1].split(":")[1], 16) == port and row[3] == "0A" for row in rows):
            return True
        time.sleep(0.02)
    return False


def _asked(port: int) -> None:
    """Connect as the raylet does; the gate lets the connection go (reset) or has let go."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
    except ConnectionError:
        pass


def test_the_agent_starts_once_asked_as_the_same_process() -> None:
    """The raylet watches the process it started: the agent is that process (exec), and
    starts only once a connection comes, at the priority the gate was started with."""
    with reserved_port() as port:  # held as the driver holds it
        gate = subprocess.Popen(_gate(port, "--node-ip-address=127.0.0.1"),
                                stdout=subprocess.PIPE, text=True,
                                env=_as_a_raylet_starts_it(os.getpid()))
        try:
            listens = _listening(port)
            still_gate = agent_gate.__file__.encode() in \
                Path(f"/proc/{gate.pid}/cmdline").read_bytes()
            _asked(port)
            out, _ = gate.communicate(timeout=60)
        finally:
            gate.kill()
    assert listens and still_gate
    assert out.split() == ["agent", str(gate.pid), str(os.getpriority(os.PRIO_PROCESS, 0))]


def test_the_agent_starts_at_once_without_its_address() -> None:
    """Without the agent's address the gate cannot listen where the raylet asks: the agent
    starts at once, as Ray would start it."""
    with reserved_port() as port:
        out = subprocess.run(_gate(port), capture_output=True, text=True, timeout=60,
                             check=True, env=_as_a_raylet_starts_it(os.getpid())).stdout
    assert out.startswith("agent ")


def test_the_agent_starts_at_once_where_its_port_is_taken() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        out = subprocess.run(_gate(port, "--node-ip-address=127.0.0.1"), capture_output=True,
                             text=True, timeout=60, check=True,
                             env=_as_a_raylet_starts_it(os.getpid())).stdout
    assert out.startswith("agent ")


def test_a_gate_ends_with_its_raylet() -> None:
    """A gate whose raylet (its parent) is gone ends, and starts no agent."""
    with reserved_port() as port:
        starter = ("import os, subprocess, sys; "
                   f"print(subprocess.Popen({_gate(port, '--node-ip-address=127.0.0.1')!r},"
                   " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,"
                   " env={**os.environ, 'RAY_RAYLET_PID': str(os.getpid())}).pid, flush=True);"
                   " sys.stdin.read()")  # until the test lets it end
        raylet = subprocess.Popen([sys.executable, "-c", starter], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert raylet.stdout is not None and raylet.stdin is not None
        gate = int(raylet.stdout.readline())
        listens = _listening(port)
        raylet.stdin.close()
        raylet.wait(timeout=60)
        deadline = time.monotonic() + 60
        while _alive(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        ended = not _alive(gate)
    assert listens and ended


def test_a_gate_whose_raylet_ended_before_it_started_ends() -> None:
    """Its parent is then whoever adopted it, not the raylet it names (RAY_RAYLET_PID)."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    with reserved_port() as port:
        done = subprocess.run(_gate(port, "--node-ip-address=127.0.0.1"), capture_output=True,
                              text=True, timeout=60, env=_as_a_raylet_starts_it(int(gone)))
    assert (done.returncode, done.stdout) == (0, "")


def _alive(pid: int) -> bool:
    try:  # a zombie has ended: only its parent has not collected it yet
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@ray.remote(num_cpus=0)
class _Probe:
    def seen(self, name: str) -> str | None:
        return os.environ.get(name)


def test_the_agent_starts_once_asked_at_the_drivers_priority_on_the_port_the_raylet_was_told(
        tmp_path: Path) -> None:
    """The raylet no longer waits for the agent's Python to bind a port: hpo holds a port
    for the agent and tells the raylet (`ray.init` returns before the agent has started).
    The agent starts only once asked (a run
    whose trials inherit Tune's variables asks nothing), at the driver's priority (at nice
    19 it starved behind busy processes, and the raylet gave it up and ended the run),
    listens on that port and serves a runtime env asked of it (an actor's own env_vars)."""
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        workers_env = workers_environ()
        given = [arg for arg in _command(_raylet()) if arg.startswith("--runtime_env_agent_port=")]
        told = given[0].split("=", 1)[1] if len(given) == 1 else "0"
        gate = _runtime_env_agent()  # the gate's Python, with the agent's command in its own
        waits = _listening(int(told)) and agent_gate.__file__ in _command(gate)
        own = _Probe.options(runtime_env={"env_vars": {"HPO_AGENT_TEST": "2"}}).remote()
        served = ray.get(own.seen.remote("HPO_AGENT_TEST"), timeout=120)
        with socket.create_connection((ray.util.get_node_ip_address(), int(told)), timeout=10):
            pass  # the agent listens on it (hpo's holder never listens)
        agent = _runtime_env_agent()
        became = agent_gate.__file__ not in _command(agent)
        niceness = int(Path(f"/proc/{agent}/stat").read_text().rsplit(")", 1)[1].split()[16])
    assert workers_env is not None and workers_env["PL_DISABLE_FORK"] == "1"
    assert workers_environ() is None  # once that Ray is gone
    assert int(told) > 0 and waits
    assert served == "2"
    assert (agent, became) == (gate, True)  # the process the raylet started, now the agent
    assert niceness == os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.slow
def test_a_trial_sees_tunes_env_vars_from_its_worker_without_a_runtime_env(
        tmp_path: Path) -> None:
    import hpo

    out = tmp_path / "seen.json"
    spec = {"name": "env", "trainable": "tests/support/study_trainables.py:environment",
            "metric": "score", "mode": "max", "num_samples": 1,
            "constants": {"out": str(out)}, "storage": str(tmp_path)}
    result = hpo.run(spec, keep_ray=False)
    assert result.errors == 0
    assert json.loads(out.read_text()) == {"PL_DISABLE_FORK": "1", "runtime_env": {}}


def _runtime_env_agent(timeout_s: float = 60.0) -> int:
    """The pid of this process's runtime-env agent once it runs (its command, or the title
    it gives itself)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for pid in descendants(os.getpid()):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
                raylet = Path(f"/proc/{pid}/comm").read_text().strip() == "raylet"
            except OSError:
                continue
            if not raylet and (b"runtime_env/agent/main.py" in command
                               or b"ray::RuntimeEnvAgent" in command):
                return pid
        assert time.monotonic() < deadline, "no runtime-env agent"
        time.sleep(0.05)


def _raylet() -> int:
    return next(pid for pid in descendants(os.getpid()) if _comm(pid) == "raylet")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:  # a process that ended meanwhile
        return ""


def _command(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
