"""A fork server that cannot make working forks costs the run its speed, never its trials: the
raylet's environment is read once its exec has set it, the server forks no worker whose
token settings are not its own, and the first fork that fails its start turns forking off
(Ray starts the node's workers itself, and the run says so once)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hpo.ray_adapters.fast_start import fork_server_child, fork_server_loop, raylet_env

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="forks need Linux's pidfds"),
              pytest.mark.usefixtures("speed_patches_on")]  # tests a speed patch itself


def test_a_raylet_read_in_its_exec_is_read_again_until_its_environment_is_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/<pid>/environ reads empty while the exec that Popen returned from has not set
    the new environment yet: the server was once given that empty environment, imported
    Ray with token auth off, and every fork it made was refused by the GCS."""
    raylet = subprocess.Popen(["sleep", "60"], env={"RAY_AUTH_MODE": "token", "A": "1"})
    reads: list[Path] = []
    read_bytes = Path.read_bytes

    def in_exec_at_first(path: Path) -> bytes:
        if path.name == "environ" and not reads:
            reads.append(path)
            return b""  # as the kernel answers before the exec sets the bounds
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", in_exec_at_first)
    try:
        env = raylet_env.workers_env(raylet.pid)
    finally:
        raylet.kill()
        raylet.wait()
    assert reads
    assert env == {"RAY_AUTH_MODE": "token", "A": "1"}


def test_a_stub_whose_token_settings_are_not_the_servers_turns_forking_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray read the server's token settings once, at its import: a fork for a stub whose
    settings differ would fail at the GCS, so none is made, then or after, and the driver is
    told once."""
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_RAYLET_PID", str(os.getpid()))  # a raylet still running
    monkeypatch.setenv("RAY_JOB_ID", "01000000")
    read, write = os.pipe()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server = fork_server_loop.Server(listener, fork_server_loop.Orders(read), lambda: True,
                                     write)
    args = ["default_worker.py", "--language=PYTHON"]
    stub = {name: os.environ[name] for name in ("RAY_JOB_ID", "RAY_RAYLET_PID")}
    try:
        assert server._judged(sys.executable, "/", args, {**stub, "RAY_AUTH_MODE": "token"})
        assert server._judged(sys.executable, "/", args, stub) is None  # no token settings
        assert server._judged(sys.executable, "/", args, {**stub, "RAY_AUTH_MODE": "token"}) \
            is None  # forking is off
        os.close(write)
        with open(read, "rb") as notices:
            told = notices.read().decode()
    finally:
        listener.close()
    assert told == "the fork server's Ray token settings are not its raylet's\n"


def test_the_first_fork_that_fails_its_start_turns_forking_off_for_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Every fork fails its start (the test switch: as forks refused by the GCS did): the
    study still ends with every trial TERMINATED, in workers Ray started itself, and the run
    says so in one line."""
    import hpo

    monkeypatch.setenv(fork_server_child.FAIL_START_ENV, "1")  # the raylet's, so the stubs'
    spec = {"name": "forks_fail", "trainable": "tests/support/study_trainables.py:parent_process",
            "metric": "score", "mode": "max", "num_samples": 4,
            "search_space": {"x": {"uniform": [0.0, 1.0]}}, "storage": str(tmp_path)}
    with caplog.at_level(logging.WARNING, logger="hpo.ray"):
        frame = hpo.run(spec, num_cpus=2, keep_ray=False).dataframe
    said = [record.getMessage() for record in caplog.records
            if "fork-workers is off" in record.getMessage()]
    assert list(frame["status"]) == ["TERMINATED"] * 4
    assert list(frame["forked"]) == [False] * 4  # Ray's own workers
    assert len(said) == 1, said
    assert "ended before it registered with its raylet" in said[0]
