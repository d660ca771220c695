"""A fork server that cannot make working forks costs the run its speed, never its trials: the
raylet's environment is read once its exec has set it, the server forks no worker whose
token settings are not its own, and the first fork that fails its start turns forking off
(Ray starts the node's workers itself, and the run says so once)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpo.ray_adapters.fast_start import fork_server

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="forks need Linux's pidfds")


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
        env = fork_server.workers_env(raylet.pid)
    finally:
        raylet.kill()
        raylet.wait()
    assert reads
    assert env == {"RAY_AUTH_MODE": "token", "A": "1"}
