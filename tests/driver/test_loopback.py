"""A plain `hpo run` (embedded Ray) listens on loopback only: read from `ss -ltnp` while a
real run goes, for every process the run started (the driver, gcs_server, raylet, workers)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from calls import ROOT, is_loopback

SPEC = {"name": "loopback", "trainable": "tests/support/study_trainables.py:steady",
        "metric": "score", "mode": "max", "search_space": {"x": {"grid": [0.1, 0.2]}},
        "constants": {"steps": 40, "sleep": 0.25}}


def _descendants(root: int) -> set[int]:
    """`root` and every process below it (from /proc: ppid of each)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # ended meanwhile
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, grew = {root}, True
    while grew:
        below = {pid for pid, ppid in parent.items() if ppid in found} - found
        found |= below
        grew = bool(below)
    return found


def listeners(pids: set[int]) -> list[tuple[str, str]]:
    """(local address, process) of each listening TCP socket owned by one of `pids`."""
    table = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in table.splitlines():
        fields = line.split()
        owners = {int(p) for p in _pids(line)}
        if owners & pids:
            found.append((fields[3], line.split("users:", 1)[-1]))
    return found


def _pids(line: str) -> list[str]:
    return [part.split(",", 1)[0] for part in line.split("pid=")[1:]]


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1:4000", True), ("[::ffff:127.0.0.1]:4000", True), ("[::1]:4000", True),
    ("*:4000", False), ("0.0.0.0:4000", False), ("[::]:4000", False), ("192.0.2.2:4000", False),
])
def test_is_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


# A run from the CLI, and one from Python in a process that imported ray before hpo (a
# notebook that builds its search space with ray.tune): Ray reads its local-only switch at
# its import, so that run's Ray listened on all interfaces before hpo kept it on loopback.
RUNS = {
    "cli": ["-m", "hpo", "run", "{spec}", "--storage", "{storage}", "--cpus", "2"],
    "python after import ray": [
        "-c", "import ray, hpo; hpo.run({spec!r}, storage={storage!r}, num_cpus=2)"],
}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
@pytest.mark.parametrize("how", sorted(RUNS))
def test_a_plain_run_listens_on_loopback_only(tmp_path: Path, how: str) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SPEC))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    paths = {"spec": str(tmp_path / "s.yaml"), "storage": str(tmp_path / "r")}
    proc = subprocess.Popen([sys.executable, *(arg.format(**paths) for arg in RUNS[how])],
                            cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        seen = _listeners_once_trials_run(proc, tmp_path / "r" / "loopback")
    finally:
        if proc.poll() is None:  # the driver alone: a SIGTERM to the whole group ends Ray
            os.kill(proc.pid, signal.SIGTERM)  # under the driver, which then waits up to 60 s
        try:
            proc.communicate(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    processes = " ".join(owner for _, owner in seen)
    assert "gcs_server" in processes and "raylet" in processes, seen
    assert [s for s in seen if not is_loopback(s[0])] == []


def _listeners_once_trials_run(proc: subprocess.Popen[str],
                               exp_dir: Path) -> list[tuple[str, str]]:
    """The run's listeners, read once a trial has reported (its worker is up)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        if any(p.stat().st_size for p in exp_dir.glob("*/result.json")):
            return listeners(_descendants(proc.pid))
        time.sleep(0.2)
    pytest.fail("no trial reported within 120 s")
