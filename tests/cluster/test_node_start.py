"""A worker node's `ray start` that fails during start-up (Ray gives a raylet a fixed 30 s to
register, which a busy node misses) is started again within slurm.startup_timeout_s, the
processes the failed start left behind killed first; the head's is not retried."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hpo.cluster.node import CONFIG_FILE, START_ATTEMPTS, _RayProcess, stop_tree
from hpo.cluster.ray_logs import RAY_LOG_MARK
from hpo.cluster.render import node_dir, ray_temp_dir

# Fails (leaving a child behind, as a failed raylet start can) until it has run `fails`
# times, then runs like `ray start --block`.
JOB_ID = f"test{os.getpid()}"  # this module's private node folder: /tmp/hpo-test<pid>


@pytest.fixture(autouse=True)
def _no_node_folder_left() -> Iterator[None]:
    yield
    shutil.rmtree(node_dir(JOB_ID), ignore_errors=True)


SCRIPT = """
import os, subprocess, sys, time
runs = sys.argv[1] + ".runs"
n = len(open(runs).read()) if os.path.exists(runs) else 0
open(runs, "a").write("x")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1] + f".child{n}", "w").write(str(child.pid))
if n < int(sys.argv[2]):
    sys.exit(1)
time.sleep(600)
"""


def _job_dir(tmp_path: Path, timeout: float) -> Path:
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"timeout": timeout}))
    return tmp_path


def _gone(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return raw[raw.rindex(")") + 2] == "Z"


def _watch(ray: _RayProcess, seconds: float, until: Callable[[], bool] = lambda: False,
           wanted: Callable[[], bool] = lambda: True) -> bool:
    """Poll as node.main does, for `seconds` or until `until()`; True while it still runs."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        if not ray.running(wanted):
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def groups() -> Iterator[list[_RayProcess]]:
    """The starts a test made: each one's last process group killed at the end, whatever it
    left (a retry kills the groups before it)."""
    started: list[_RayProcess] = []
    yield started
    for ray in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(ray.proc.pid, signal.SIGKILL)


def _started(folder: Path, role: str, fails: int, groups: list[_RayProcess],
             timeout: float = 120) -> _RayProcess:
    folder.mkdir(exist_ok=True)
    args = [sys.executable, "-c", SCRIPT, str(folder / "ray"), str(fails)]
    ray = _RayProcess(role, args, dict(os.environ), _job_dir(folder, timeout), JOB_ID)
    groups.append(ray)
    return ray


def _runs(folder: Path) -> int:
    return len((folder / "ray.runs").read_text())


def test_a_worker_whose_start_fails_is_started_again_and_its_leftovers_killed(
        tmp_path: Path, groups: list[_RayProcess], capsys: pytest.CaptureFixture[str]) -> None:
    logs = Path(ray_temp_dir(JOB_ID), "session_latest", "logs")  # the failed start's
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "raylet.out").write_text("an earlier start's\n")
    time.sleep(0.01)  # the next file is newer, whatever the file system's clock resolution
    (logs / "raylet.1.out").write_text("the raylet's last words\n")  # a retried start's
    ray = _started(tmp_path, "worker", 1, groups)
    assert _watch(ray, 120.0, until=lambda: (tmp_path / "ray.child1").exists())
    assert RAY_LOG_MARK + "the raylet's last words" in capsys.readouterr().out.splitlines()
    assert _watch(ray, 1.0)  # still running: the second start holds
    assert _runs(tmp_path) == 2 and ray.attempt == 2
    left = int((tmp_path / "ray.child0").read_text())
    deadline = time.monotonic() + 10
    while not _gone(left) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(left)


def test_retries_end_after_the_last_attempt(tmp_path: Path, groups: list[_RayProcess]) -> None:
    ray = _started(tmp_path, "join", START_ATTEMPTS, groups)
    assert not _watch(ray, 30.0)
    assert _runs(tmp_path) == START_ATTEMPTS and ray.proc.returncode == 1


def test_no_retry_for_the_head_or_after_the_start_up_time(tmp_path: Path,
                                                          groups: list[_RayProcess]) -> None:
    head = _started(tmp_path / "head", "head", 1, groups)
    assert not _watch(head, 30.0) and _runs(tmp_path / "head") == 1
    late = _started(tmp_path / "late", "worker", 1, groups, timeout=0.01)
    time.sleep(0.05)
    assert not _watch(late, 30.0) and _runs(tmp_path / "late") == 1
    # a node asked to stop (the job ends) is not started again either
    stopped = _started(tmp_path / "stopped", "worker", 1, groups)
    stopped.proc.wait(timeout=60)  # its start failed, and the job asks the node to stop
    assert not stopped.running(lambda: False) and stopped.attempt == 1
    assert _runs(tmp_path / "stopped") == 1


def test_a_running_node_asked_to_stop_is_not_running(tmp_path: Path,
                                                     groups: list[_RayProcess]) -> None:
    ray = _started(tmp_path, "worker", 0, groups)
    assert _watch(ray, 120.0, until=lambda: (tmp_path / "ray.child0").exists())
    assert not ray.running(lambda: False) and ray.proc.poll() is None  # main stops it next


# A node's stop, as stop_tree meets it: `ray start --block` (the watcher) and an agent would
# wait when asked with SIGTERM (Ray's drain through a head that is stopping too; a report to
# that head holding off the agent's handler); a worker notes whether the raylet still runs
# when it is asked. Each says it is ready once its handler is set.
SLEEP = "time.sleep(600)"
DEAF = f"""
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: time.sleep(600))
open(sys.argv[1], "w").write("ready")
{SLEEP}
"""
WORKER = f"""
import os, signal, sys, time
def asked(*_):
    stat = open(f"/proc/{{sys.argv[2]}}/stat").read()
    open(sys.argv[3], "w").write(str(stat.rsplit(")", 1)[1].split()[0] not in "ZX"))
    sys.exit(0)
signal.signal(signal.SIGTERM, asked)
open(sys.argv[1], "w").write("ready")
{SLEEP}
"""
WATCHER = f"""
import subprocess, sys, time
folder, python = sys.argv[1], sys.executable
raylet = subprocess.Popen([folder + "/raylet", "-c", "import time; {SLEEP}"], executable=python)
agent = subprocess.Popen(["ray::DashboardAgent", "-c", sys.argv[2], folder + "/agent"],
                         executable=python)
worker = subprocess.Popen([python, "-c", sys.argv[3], folder + "/worker", str(raylet.pid),
                           folder + "/raylet_ran"])
open(folder + "/pids", "w").write(f"{{raylet.pid}} {{agent.pid}} {{worker.pid}}")
exec(sys.argv[2].replace("sys.argv[1]", "folder + '/watcher'"))
"""


@pytest.mark.parametrize("leaving", [False, True])
def test_a_node_stops_without_waiting_for_ray_starts_drain_or_its_agents(
        tmp_path: Path, leaving: bool) -> None:
    (tmp_path / "raylet").symlink_to(sys.executable)
    watcher = subprocess.Popen([sys.executable, "-c", WATCHER, str(tmp_path), DEAF, WORKER])
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / name).exists() for name in ("agent", "worker", "watcher")):
            assert time.monotonic() < deadline and watcher.poll() is None
            time.sleep(0.05)
        pids = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
        started = time.monotonic()
        stop_tree(watcher, grace=120, leaving=leaving)
        took = time.monotonic() - started
    finally:
        watcher.kill()
    assert watcher.returncode == -signal.SIGKILL and all(_gone(pid) for pid in pids)
    assert took < 60, took  # no grace period: neither the watcher nor the agent waited for
    # the raylet stops with `ray start`, after the workers; first where the node leaves a
    # running study (the head's GCS is up to take its report)
    assert (tmp_path / "raylet_ran").read_text() == str(not leaving)
