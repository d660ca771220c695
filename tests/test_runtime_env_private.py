"""The embedded Ray's runtime-env agent off the way to the first trial (issue 36): Tune's
trial actors carry no runtime env where every worker inherits its env_vars, the raylet is told
the agent's port ahead, and the agent runs niced (hpo.driver.runtime_env_private)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from hpo.cluster.node import descendants
from hpo.driver.ray_session import embedded_ray
from hpo.driver.ray_start_private import niced_agent
from hpo.driver.runtime_env_private import (
    AGENT_COMMAND,
    TUNE_DEFAULT_ENV,
    trial_actors_without_runtime_env,
    tune_env_vars,
    workers_environ,
)


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


def test_only_the_runtime_env_agents_command_is_niced() -> None:
    command = f"{AGENT_COMMAND}/py -u /ray/agent/main.py --node-id=ab"
    niced = niced_agent(command, AGENT_COMMAND)
    assert niced.startswith(AGENT_COMMAND)
    assert niced[len(AGENT_COMMAND):].split()[1:3] == ["-n", "19"]
    assert niced.endswith(" /py -u /ray/agent/main.py --node-id=ab")
    for other in ("--dashboard_agent_command=/py agent.py", "--head",
                  "--python_worker_command=/py setup_worker.py"):
        assert niced_agent(other, AGENT_COMMAND) == other


@ray.remote(num_cpus=0)
class _Probe:
    def seen(self, name: str) -> str | None:
        return os.environ.get(name)


def test_the_agent_is_niced_on_the_port_the_raylet_was_told_and_serves_runtime_envs(
        tmp_path: Path) -> None:
    """The raylet no longer waits for the agent's Python to bind a port: hpo holds a port
    for the agent and writes its port file ahead. The agent listens on that port and serves
    a runtime env asked of it (an actor's own env_vars)."""
    with embedded_ray(tmp_path / "hpo.log", num_cpus=1):
        workers_env = workers_environ()
        told = _agent_port_file()
        agent = _runtime_env_agent()
        given = [arg for arg in _command(_raylet()) if arg.startswith("--runtime_env_agent_port=")]
        own = _Probe.options(runtime_env={"env_vars": {"HPO_AGENT_TEST": "2"}}).remote()
        served = ray.get(own.seen.remote("HPO_AGENT_TEST"), timeout=120)
        with socket.create_connection((ray.util.get_node_ip_address(), int(told)), timeout=10):
            pass  # the agent listens on it (hpo's holder never listens)
        niceness = int(Path(f"/proc/{agent}/stat").read_text().rsplit(")", 1)[1].split()[16])
    assert workers_env is not None and workers_env["PL_DISABLE_FORK"] == "1"
    assert workers_environ() is None  # once that Ray is gone
    assert given == [f"--runtime_env_agent_port={told}"]
    assert served == "2"
    assert niceness == 19


@pytest.mark.slow
def test_a_trial_sees_tunes_env_vars_from_its_worker_without_a_runtime_env(
        tmp_path: Path) -> None:
    import hpo

    out = tmp_path / "seen.json"
    spec = {"name": "env", "trainable": "tests/study_trainables.py:environment",
            "metric": "score", "mode": "max", "num_samples": 1,
            "constants": {"out": str(out)}, "storage": str(tmp_path)}
    result = hpo.run(spec, keep_ray=False)
    assert result.errors == 0
    assert json.loads(out.read_text()) == {"PL_DISABLE_FORK": "1", "runtime_env": {}}


def _agent_port_file() -> str:
    session = next(arg for arg in _command(_raylet()) if arg.startswith("--session_dir="))
    name = f"runtime_env_agent_port_{ray.get_runtime_context().get_node_id()}"
    return (Path(session.split("=", 1)[1]) / name).read_text()


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
