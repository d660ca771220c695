"""One writer per experiment folder (hpo/driver/guards/lease.py): two real `hpo run` (and two
`hpo resume`) started at once on one folder, exactly one runs; stale leases are taken over,
live ones never; the takeover is one atomic step. Fencing across processes (SIGSTOP, skewed
clocks): tests/driver/test_lease_fencing.py."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from calls import ROOT

from hpo.driver.guards import lease, lease_holder
from hpo.driver.guards.lease import LEASE_FILE, Holder, experiment_lease, takeover_reason
from hpo.errors import LeaseError
from hpo.results import load_results

SPEC = """
name: raced
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
num_samples: 2
search_space:
  x: {uniform: [0.0, 1.0]}
constants: {steps: 3, sleep: 0.5}
search: {type: random, seed: 3}
checkpoint: {frequency: 1, keep: 1}
"""


def _race(*commands: list[str]) -> list[subprocess.CompletedProcess]:
    """Start every command at once and wait for all (no sleeps: they really overlap)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "hpo", *cmd], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for cmd in commands]
    done = []
    for proc, cmd in zip(procs, commands, strict=True):
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(cmd, proc.returncode, out, err))
    return done


def _one_ran(done: list[subprocess.CompletedProcess], exp_dir: Path) -> None:
    codes = sorted(p.returncode for p in done)
    assert codes == [0, 3], [(p.returncode, p.stderr[-2000:]) for p in done]
    refused = next(p for p in done if p.returncode == 3)
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith(f"error: {exp_dir}: in use by another hpo run (host "
                               f"{socket.gethostname()}, pid "), lines[0]
    assert "Hint: wait for it to end" in lines[0]
    assert not (exp_dir / LEASE_FILE).exists()  # released by the one that ran


@pytest.fixture(scope="module")
def raced(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, Path]:
    tmp = tmp_path_factory.mktemp("lease")
    space = tmp / "raced.yaml"
    space.write_text(SPEC)
    storage = tmp / "results"
    done = _race(*[["run", str(space), "--storage", str(storage), "--cpus", "2"]] * 2)
    return done, storage / "raced"


@pytest.mark.ray
@pytest.mark.slow
def test_two_runs_started_at_once_one_runs(raced: tuple[list, Path]) -> None:
    done, exp_dir = raced
    _one_ran(done, exp_dir)
    assert len(list(exp_dir.glob("experiment_state-*.json"))) == 1
    frame = load_results(exp_dir)
    assert len(frame) == 2 and set(frame["status"]) == {"TERMINATED"}
    assert len([p for p in exp_dir.iterdir() if (p / "result.json").exists()]) == 2


@pytest.mark.ray
@pytest.mark.slow
def test_two_resumes_of_a_finished_study_at_once_both_say_so(
        raced: tuple[list, Path]) -> None:
    # A finished study has nothing to resume: each resume says so and writes nothing, so
    # neither needs the lease (two runs at once on one folder: the test above).
    _, exp_dir = raced
    before = load_results(exp_dir)
    done = _race(["resume", str(exp_dir), "--cpus", "2"], ["resume", str(exp_dir), "--cpus",
                                                             "2"])
    assert all(d.returncode == 0 and "has finished" in d.stderr for d in done), done
    assert load_results(exp_dir).equals(before)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_lease(exp_dir: Path, holder: Holder, beat: int = 0) -> bytes:
    exp_dir.mkdir(parents=True, exist_ok=True)
    raw = lease._record(holder, beat)
    (exp_dir / LEASE_FILE).write_bytes(raw)
    return raw


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short stale times: a holder beating every 0.1 s is stale after 2 * 0.1 + 0.3 s."""
    monkeypatch.setattr(lease_holder, "CACHE_MARGIN_S", 0.3)


@contextlib.contextmanager
def _beating(exp_dir: Path, holder: Holder) -> Iterator[None]:
    """A live holder elsewhere: its record's beat goes up every period."""
    stop = threading.Event()

    def beat() -> None:
        count = 0
        while not stop.wait(holder.period_s):
            count += 1
            (exp_dir / LEASE_FILE).write_bytes(lease._record(holder, count))

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _wait_for(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_lease_of_a_dead_process_is_taken_over(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    dead = replace(lease.me({}), pid=_dead_pid(), started="1", token="old")
    _write_lease(tmp_path, dead)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "hpo.lease"), experiment_lease(tmp_path):
        mine = json.loads((tmp_path / LEASE_FILE).read_text())
        assert mine["pid"] == os.getpid() and mine["token"] != "old"
    assert time.monotonic() - started < 5  # at once: no watching a pid known to be gone
    assert f"took over the lease of host {dead.host}, pid {dead.pid}" in caplog.text
    assert "is gone" in caplog.text
    assert not (tmp_path / LEASE_FILE).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temp or stale copies left


def test_live_lease_on_another_node_refuses_with_one_line(tmp_path: Path, fast: None) -> None:
    other = Holder("node7", 4242, "99", "1234", 0, 0.1, "theirs")
    _write_lease(tmp_path, other)
    with (_beating(tmp_path, other), pytest.raises(LeaseError) as caught,
          experiment_lease(tmp_path, "resume")):
        pytest.fail("entered a folder another run holds")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path}: in use by another hpo run (host node7, pid 4242, "
                              "Slurm job 1234 (restart 0); heartbeat 0 s ago)"), message
    assert f"`hpo resume {tmp_path}` again" in message and "\n" not in message
    assert caught.value.exit_code == 3
    with (_beating(tmp_path, other), pytest.raises(LeaseError) as caught,
          experiment_lease(tmp_path, "run")):
        pytest.fail("entered a folder another run holds")
    assert f"wait for it to end, then `hpo resume {tmp_path}` continues it;" in \
        str(caught.value)  # it said "then it again" to a run
    assert json.loads((tmp_path / LEASE_FILE).read_text())["token"] == "theirs"  # untouched


def test_live_process_on_this_host_refuses_at_once(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _wait_for(lambda: len(lease._stat(proc.pid)) > 19)
        holder = replace(lease.me({}), pid=proc.pid, started=lease._stat(proc.pid)[19],
                         token="theirs")
        _write_lease(tmp_path, holder)
        started = time.monotonic()
        with pytest.raises(LeaseError, match="its process is running"), \
                experiment_lease(tmp_path):
            pytest.fail("entered a folder another run holds")
        assert time.monotonic() - started < 2  # no waiting for a beat
    finally:
        proc.kill()
        proc.wait()


def test_silent_lease_on_another_node_is_taken_over_after_its_stale_time(
        tmp_path: Path, fast: None, caplog: pytest.LogCaptureFixture) -> None:
    silent = Holder("node7", 4242, "99", "", 0, 0.1, "theirs")
    _write_lease(tmp_path, silent)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "hpo.lease"), experiment_lease(tmp_path):
        waited = time.monotonic() - started
        assert json.loads((tmp_path / LEASE_FILE).read_text())["pid"] == os.getpid()
    assert silent.stale_s() <= waited < 5, waited
    assert "its heartbeat did not advance for 0.5 s" in caplog.text


def test_nested_leases_in_one_process_share_it(tmp_path: Path) -> None:
    with experiment_lease(tmp_path / "exp"):
        with experiment_lease(tmp_path / "exp"):  # slurm.py around run()/resume()
            pass
        assert (tmp_path / "exp" / LEASE_FILE).exists()
    assert not (tmp_path / "exp").exists()  # made here and nothing written: removed again


def test_heartbeat_advances_the_beat(tmp_path: Path) -> None:
    lost: list[str] = []
    with experiment_lease(tmp_path, env={lease.PERIOD_ENV: "0.05"}, on_lost=lost.append):
        path = tmp_path / LEASE_FILE
        inode = path.stat().st_ino
        _wait_for(lambda: json.loads(path.read_text())["beat"] >= 3)
        assert path.stat().st_ino == inode  # rewritten in place: the name never goes away
    assert lost == []


def _taken_by(path: Path, taker: Holder) -> None:
    """Take the lease over as a claimant that judged it stale (retried: the holder beats)."""
    _wait_for(lambda: lease._take_over(path, path.read_bytes(), taker))


def test_holder_that_lost_its_lease_says_who_and_never_writes_it(tmp_path: Path) -> None:
    lost: list[str] = []
    taker = Holder("node9", 99, "", "555", 0, 10.0, "taker")
    with experiment_lease(tmp_path, env={lease.PERIOD_ENV: "0.05"}, on_lost=lost.append):
        path = tmp_path / LEASE_FILE
        _taken_by(path, taker)
        _wait_for(lambda: lost)
        time.sleep(0.3)  # several periods: the holder must not write into the taker's lease
        assert path.read_bytes() == lease._record(taker, 0)
    assert len(lost) == 1 and "\n" not in lost[0], lost
    assert lost[0].startswith(f"{tmp_path}: this run's lease was taken over by another hpo "
                              "run (host node9, pid 99, Slurm job 555 (restart 0))"), lost[0]
    assert "stopped without writing more. Hint: " in lost[0]
    assert path.read_bytes() == lease._record(taker, 0)  # not released: not ours
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEASE_FILE]


def test_holder_whose_lease_was_removed_has_lost_it(tmp_path: Path) -> None:
    lost: list[str] = []
    with experiment_lease(tmp_path, env={lease.PERIOD_ENV: "0.05"}, on_lost=lost.append):
        (tmp_path / LEASE_FILE).unlink()
        _wait_for(lambda: lost)
        assert not (tmp_path / LEASE_FILE).exists()  # never created again by the holder
    assert "this run's lease was removed" in lost[0]


def test_takeover_loses_to_a_beat_in_between(tmp_path: Path) -> None:
    holder = Holder("node7", 4242, "99", "", 0, 10.0, "theirs")
    watched = _write_lease(tmp_path, holder)
    beaten = _write_lease(tmp_path, holder, beat=1)  # after the claimant's last look
    assert not lease._take_over(tmp_path / LEASE_FILE, watched, lease.me({}))
    assert (tmp_path / LEASE_FILE).read_bytes() == beaten  # put back as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEASE_FILE]


def _race_takeovers(path: Path, watched: bytes, count: int) -> list[Holder]:
    """`count` claimants take the same watched lease over at once; those that got it."""
    claimants = [lease.me({}) for _ in range(count)]
    barrier, won = threading.Barrier(count), []

    def claim(claimant: Holder) -> None:
        barrier.wait()
        if lease._take_over(path, watched, claimant):
            won.append(claimant)

    threads = [threading.Thread(target=claim, args=(c,)) for c in claimants]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won


def test_claimants_racing_for_one_stale_lease_one_takes_it(tmp_path: Path) -> None:
    path = tmp_path / LEASE_FILE
    for _ in range(20):
        watched = _write_lease(tmp_path, Holder("node7", 4242, "99", "", 0, 10.0, "old"))
        won = _race_takeovers(path, watched, 6)
        assert len(won) == 1, won
        assert path.read_bytes() == lease._record(won[0], 0)
        assert sorted(p.name for p in tmp_path.iterdir()) == [LEASE_FILE]


ME = Holder("node1", os.getpid(), "", "77", 1, 10.0, "me")


@pytest.mark.parametrize(("holder", "reason"), [
    (replace(ME, host="node2", pid=1, token="a"), None),  # elsewhere: watched, not judged
    (replace(ME, host="node2", pid=1, restart=0, token="a"), "Slurm requeued job 77"),
    (replace(ME, host="node2", pid=1, restart=1, token="a"), None),  # same restart
    (replace(ME, host="node2", pid=1, job_id="78", restart=0, token="a"), None),
    (replace(ME, token="a"), None),  # this very process (pid alive, same host)
    (replace(ME, started="1", token="a"), "is gone"),  # pid reused by another process
    (replace(ME, host="?", pid=-1, token="a"), None),  # unreadable: watched
])
def test_takeover_rules(holder: Holder, reason: str | None) -> None:
    found = takeover_reason(holder, ME)
    assert (found is None) if reason is None else (reason in (found or "")), found
