"""A lease that fences (hpo/driver/guards/lease.py), with real processes as holders: one stopped
past its stale time is taken over and, once continued, exits 3 with one line and writes nothing
more into the experiment; one whose clock is 10 minutes off is neither taken over while alive
nor immortal when dead (the claimant only trusts what it sees change, by its own clock)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from calls import ROOT

from hpo.driver.guards import lease, lease_holder
from hpo.driver.guards.lease import LEASE_FILE, experiment_lease
from hpo.errors import LeaseError

# A holder, run as `python -c HOLDER EXP_DIR SKEW_S HOST`: takes the lease through hpo's API
# and writes into the experiment ("state") in a loop while it holds it.
HOLDER = """
import os, socket, sys, threading, time
from pathlib import Path

exp, skew, host = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
real_time = time.time
time.time = lambda: real_time() + skew  # this node's clock is off by SKEW_S
if host:  # on another node: a claimant cannot look at its pid
    socket.gethostname = lambda: host
from hpo.driver.guards.lease import LEASE_FILE, experiment_lease

def stamp():  # as a node with a skewed clock stamps the files it writes (Lustre: the client)
    while True:
        try:
            os.utime(exp / LEASE_FILE, (time.time(), time.time()))
        except FileNotFoundError:
            pass
        time.sleep(0.01)

def write(fd, count):  # one experiment write: one system call
    os.pwrite(fd, str(count).encode().ljust(16), 0)

with experiment_lease(exp):
    threading.Thread(target=stamp, daemon=True).start()
    fd = os.open(exp / "state", os.O_WRONLY | os.O_CREAT)
    count = 0
    while True:
        count += 1
        write(fd, count)
        time.sleep(0.02)
"""

SPEC = """
name: fenced
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
num_samples: 2
search_space:
  x: {uniform: [0.0, 1.0]}
constants: {steps: 100, sleep: 1.5}
search: {type: random, seed: 3}
checkpoint: {frequency: 1, keep: 1}
"""


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short stale times: a holder beating every 0.1 s is stale after 2 * 0.1 + 0.3 s."""
    monkeypatch.setattr(lease_holder, "CACHE_MARGIN_S", 0.3)


def _wait_for(condition: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _env(period_s: float) -> dict[str, str]:
    return {**os.environ, lease.PERIOD_ENV: str(period_s), "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start a HOLDER process on tmp_path, once it writes; killed after the test."""
    started: list[subprocess.Popen] = []

    def start(skew_s: float = 0.0, host: str = "") -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), str(skew_s),
                                 host], cwd=ROOT, env=_env(0.1), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        started.append(proc)
        _wait_for(lambda: proc.poll() is not None or (tmp_path / "state").exists() and
                  int((tmp_path / "state").read_bytes() or 0) > 2)
        assert proc.poll() is None, proc.communicate()
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.communicate()


def _stop(proc: subprocess.Popen) -> None:
    """SIGSTOP, and wait until the kernel shows it stopped (a suspended Slurm job)."""
    os.kill(proc.pid, signal.SIGSTOP)
    _wait_for(lambda: lease._stat(proc.pid)[:1] == ["T"])


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def test_stopped_holder_is_taken_over_and_once_continued_exits_3_writing_nothing(
        tmp_path: Path, fast: None, holder: Callable[..., subprocess.Popen]) -> None:
    proc = holder()
    _stop(proc)
    written = (tmp_path / "state").read_bytes()
    lost: list[str] = []
    with experiment_lease(tmp_path, "resume", on_lost=lost.append):  # it is taken over
        os.kill(proc.pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 3, err
        assert (tmp_path / "state").read_bytes() == written  # nothing after the takeover
        assert lease._read(tmp_path / LEASE_FILE).holder.pid == os.getpid()  # ours still
    assert lost == []
    line = _one_error_line(err)
    assert err.strip() == line, err  # the only line it wrote
    assert line.startswith(f"error: {tmp_path}: this run's lease was taken over by another hpo "
                           f"run (host {socket.gethostname()}, pid {os.getpid()})"), line
    assert f"Hint: the other run owns the experiment now; `hpo resume {tmp_path}`" in line


@pytest.mark.parametrize("skew_s", [600.0, -600.0])
def test_live_holder_with_a_skewed_clock_is_not_taken_over(
        tmp_path: Path, fast: None, holder: Callable[..., subprocess.Popen],
        skew_s: float) -> None:
    proc = holder(skew_s, "skewed-node")
    for _ in range(3):  # each claimant watches it beat
        with pytest.raises(LeaseError, match="in use by another hpo run .host skewed-node"), \
                experiment_lease(tmp_path, "resume"):
            pytest.fail("took the lease of a live holder")
    assert proc.poll() is None
    assert lease._read(tmp_path / LEASE_FILE).holder.pid == proc.pid


@pytest.mark.parametrize("skew_s", [600.0, -600.0])
def test_dead_holder_with_a_skewed_clock_is_taken_over(
        tmp_path: Path, fast: None, holder: Callable[..., subprocess.Popen],
        skew_s: float) -> None:
    proc = holder(skew_s, "skewed-node")
    proc.kill()
    proc.wait()
    path = tmp_path / LEASE_FILE
    stamped = time.time() + skew_s  # the last stamp its node left: 10 minutes off
    os.utime(path, (stamped, stamped))
    stale_s = lease._read(path).holder.stale_s()
    started = time.monotonic()
    with experiment_lease(tmp_path, on_lost=pytest.fail):
        waited = time.monotonic() - started
        assert lease._read(path).holder.pid == os.getpid()
    assert stale_s <= waited < stale_s + 5, waited


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """The files below `folder` the driver writes, with their size and modification time:
    all but the lease and the trials' stdout and stderr (their own processes write those)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (LEASE_FILE, "stdout", "stderr")}


def _nothing_more(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> None:
    """No file changed or went; new ones only in checkpoint folders (a trial's process, not
    stopped, persists its checkpoint at its report, before its driver takes the result)."""
    assert {path: after.get(path) for path in before} == before
    assert all("/checkpoint_" in path for path in after.keys() - before.keys()), after


def _wait_quiet(folder: Path, quiet_s: float = 0.5, timeout: float = 30.0) -> None:
    """Until no file below `folder` changed for `quiet_s`: the driver waits for results (a
    process stopped in the middle of a write completes that one write once continued)."""
    last, since = _files(folder), time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < since + timeout, "never quiet"
        time.sleep(0.05)
        now = _files(folder)
        if now != last:
            last, since = now, time.monotonic()


@pytest.mark.ray
@pytest.mark.slow
def test_stopped_hpo_run_is_taken_over_and_once_continued_exits_3_writing_nothing(
        tmp_path: Path, fast: None) -> None:
    space = tmp_path / "fenced.yaml"
    space.write_text(SPEC)
    exp_dir = tmp_path / "results" / "fenced"
    err = tmp_path / "stderr"
    with err.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "hpo", "run", str(space), "--storage",
                                 str(exp_dir.parent), "--cpus", "2"], cwd=ROOT,
                                env=_env(0.2), stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        _wait_for(lambda: proc.poll() is not None or len(list(exp_dir.glob(
            "*/result.json"))) == 2 and any(exp_dir.glob("experiment_state-*.json")), 120)
        assert proc.poll() is None, err.read_text()
        _wait_quiet(exp_dir)
        _stop(proc)
        with experiment_lease(exp_dir, "resume", on_lost=pytest.fail):
            before = _files(exp_dir)
            os.kill(proc.pid, signal.SIGCONT)
            assert proc.wait(timeout=60) == 3, err.read_text()
            _nothing_more(before, _files(exp_dir))  # no Tune save, no log line, no reserve
    finally:
        proc.kill()
        proc.wait()
    line = _one_error_line(err.read_text())
    assert line.startswith(f"error: {exp_dir}: this run's lease was taken over by another "
                           f"hpo run (host {socket.gethostname()}, pid {os.getpid()})"), line
