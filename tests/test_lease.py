"""One writer per experiment folder (hpo/driver/lease.py): two real `hpo run` (and two
`hpo resume`) started at once on one folder, exactly one runs; stale leases are taken over."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from conftest import ROOT

from hpo.driver import lease
from hpo.driver.lease import LEASE_FILE, Holder, experiment_lease, takeover_reason
from hpo.errors import LeaseError
from hpo.results import load_results

SPEC = """
name: raced
trainable: tests/test_trainables.py:steady
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
def test_two_resumes_started_at_once_one_runs(raced: tuple[list, Path]) -> None:
    _, exp_dir = raced
    _one_ran(_race(["resume", str(exp_dir), "--cpus", "2"], ["resume", str(exp_dir),
                                                              "--cpus", "2"]), exp_dir)
    assert len(load_results(exp_dir)) == 2


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_lease(exp_dir: Path, holder: Holder, age_s: float = 0.0) -> None:
    exp_dir.mkdir(parents=True, exist_ok=True)
    path = exp_dir / LEASE_FILE
    path.write_text(json.dumps(asdict(holder)))
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_lease_of_a_dead_process_is_taken_over(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    dead = replace(lease.me({}), pid=_dead_pid(), started="1", token="old")
    _write_lease(tmp_path, dead)
    with caplog.at_level(logging.WARNING, "hpo.lease"), experiment_lease(tmp_path):
        mine = json.loads((tmp_path / LEASE_FILE).read_text())
        assert mine["pid"] == os.getpid() and mine["token"] != "old"
    assert f"took over the lease of host {dead.host}, pid {dead.pid}" in caplog.text
    assert "is gone" in caplog.text
    assert not (tmp_path / LEASE_FILE).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temp or stale copies left


def test_live_lease_on_another_node_refuses_with_one_line(tmp_path: Path) -> None:
    other = Holder("node7", 4242, "99", "1234", 0, 10.0, "theirs")
    _write_lease(tmp_path, other, age_s=5)
    with pytest.raises(LeaseError) as caught, experiment_lease(tmp_path, "resume"):
        pytest.fail("entered a folder another run holds")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path}: in use by another hpo run (host node7, pid 4242, "
                              "Slurm job 1234 (restart 0); heartbeat 5 s ago)"), message
    assert f"`hpo resume {tmp_path}` again" in message and "\n" not in message
    assert caught.value.exit_code == 3
    assert json.loads((tmp_path / LEASE_FILE).read_text())["token"] == "theirs"  # untouched


def test_nested_leases_in_one_process_share_it(tmp_path: Path) -> None:
    with experiment_lease(tmp_path / "exp"):
        with experiment_lease(tmp_path / "exp"):  # slurm.py around run()/resume()
            pass
        assert (tmp_path / "exp" / LEASE_FILE).exists()
    assert not (tmp_path / "exp").exists()  # made here and nothing written: removed again


def test_heartbeat_keeps_the_lease_fresh(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease, "PERIOD_S", 0.1)
    with experiment_lease(tmp_path):
        path = tmp_path / LEASE_FILE
        old = time.time() - 100
        os.utime(path, (old, old))
        deadline = time.monotonic() + 10
        while path.stat().st_mtime < old + 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.stat().st_mtime > old + 50, "no heartbeat"


ME = Holder("node1", os.getpid(), "", "77", 1, 10.0, "me")


@pytest.mark.parametrize(("holder", "age_s", "reason"), [
    (replace(ME, host="node2", pid=1, token="a"), 5.0, None),  # alive elsewhere
    (replace(ME, host="node2", pid=1, token="a"), 79.0, None),  # 2 * 10 + 60 not yet over
    (replace(ME, host="node2", pid=1, token="a"), 81.0, "no heartbeat for 81 s"),
    (replace(ME, host="node2", pid=1, restart=0, token="a"), 5.0, "Slurm requeued job 77"),
    (replace(ME, host="node2", pid=1, restart=1, token="a"), 5.0, None),  # same restart
    (replace(ME, host="node2", pid=1, job_id="78", restart=0, token="a"), 5.0, None),
    (replace(ME, token="a"), 5.0, None),  # this very process (pid alive, same host)
    (replace(ME, started="1", token="a"), 5.0, "is gone"),  # pid reused by another process
])
def test_takeover_rules(holder: Holder, age_s: float, reason: str | None) -> None:
    found = takeover_reason(holder, ME, age_s)
    assert (found is None) if reason is None else (reason in (found or "")), found
