"""The walltime guard's pure parts: the allocation's end from Slurm's variables and output
(tables), the per-iteration estimates and `allows()` decisions under a fake clock, the stop
once, the warning at the deadline, and a pickled guard turning into the running one."""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from calls import ROOT, cli_invoke

from hpo.cluster.slurm_env import job_end_time
from hpo.driver.guards.walltime import (
    WalltimeGuard,
    active,
    catches,
    current,
    parse_end_time,
    query_end_time,
    scontrol_end_time,
)

NOON = datetime(2025, 3, 4, 12, 0, 0).timestamp()  # local time, as Slurm prints it


@pytest.mark.parametrize(("text", "end"), [
    ("2025-03-04T12:00:00", NOON),
    ("2025-03-04T12:00:00\n", NOON),
    ("  2025-03-04T13:30:05 ", NOON + 5405),
    ("N/A", None), ("Unknown", None), ("NONE", None), ("", None),
])
def test_parse_end_time(text: str, end: float | None) -> None:
    assert parse_end_time(text) == end


@pytest.mark.parametrize("bad", ["tomorrow", "2025-03-04 12:00:00", "12:00:00"])
def test_parse_end_time_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Slurm time"):
        parse_end_time(bad)


SCONTROL = """JobId=7 JobName=walltime
   JobState=RUNNING Reason=None Dependency=(null)
   RunTime=00:00:12 TimeLimit=00:01:00 TimeMin=N/A
   SubmitTime=2025-03-04T11:58:58 EligibleTime=2025-03-04T11:58:58
   StartTime=2025-03-04T11:59:00 EndTime=2025-03-04T12:00:00 Deadline=N/A
"""


@pytest.mark.parametrize(("text", "end"), [
    (SCONTROL, NOON),
    (SCONTROL.replace("EndTime=2025-03-04T12:00:00", "EndTime=Unknown"), None),
    ("JobId=7 JobState=PENDING", None),
])
def test_scontrol_end_time(text: str, end: float | None) -> None:
    assert scontrol_end_time(text) == end


@pytest.mark.parametrize(("env", "end"), [
    ({"SLURM_JOB_END_TIME": "1741086000"}, 1741086000.0),
    ({"SLURM_JOB_END_TIME": " 1741086000\n"}, 1741086000.0),
    ({"SLURM_JOB_END_TIME": "0"}, None),
    ({"SLURM_JOB_END_TIME": "soon"}, None),
    ({"SLURM_JOB_END_TIME": ""}, None),
    ({}, None),
])
def test_env_end_time(env: dict[str, str], end: float | None) -> None:
    assert job_end_time(env) == end


@pytest.mark.parametrize(("mask", "signum", "caught"), [
    ("0000000000010202", signal.SIGUSR1, True),  # bash with `trap ... USR1`
    ("0000000000010202", signal.SIGINT, True),
    ("0000000000010002", signal.SIGUSR1, False),
    ("0000000000000000", signal.SIGUSR1, False),
    (None, signal.SIGUSR1, False),
])
def test_catches(mask: str | None, signum: int, caught: bool) -> None:
    status = "Name:\tbash\nSigBlk:\t0000000000000200\n"
    status += f"SigCgt:\t{mask}\n" if mask else ""
    assert catches(status, signum) is caught


def _answers(squeue: tuple[int, str] | Exception,
             scontrol: tuple[int, str] | Exception) -> Callable[..., Any]:
    """A stand-in for subprocess.run that answers as squeue and scontrol would."""
    def run(args: list[str], **_: Any) -> subprocess.CompletedProcess:
        answer = squeue if args[0] == "squeue" else scontrol
        if isinstance(answer, Exception):
            raise answer
        return subprocess.CompletedProcess(args, answer[0], answer[1], "")
    return run


@pytest.mark.parametrize(("squeue", "scontrol", "end"), [
    ((0, "2025-03-04T12:00:00\n"), (0, ""), NOON),
    ((1, ""), (0, SCONTROL), NOON),  # squeue refused: scontrol
    (FileNotFoundError("squeue"), (0, SCONTROL), NOON),
    ((0, "N/A\n"), (0, SCONTROL), None),  # squeue answered: no end
    ((1, ""), (1, ""), None),
    (subprocess.TimeoutExpired("squeue", 30), FileNotFoundError("scontrol"), None),
    ((0, "garbage"), (0, SCONTROL), NOON),
])
def test_query_end_time(squeue: Any, scontrol: Any, end: float | None) -> None:
    assert query_end_time("7", run=_answers(squeue, scontrol)) == end


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _guard(clock: Clock, end: float = 1100.0, margin: float = 20.0,
           stop: Callable[[], None] = lambda: None) -> WalltimeGuard:
    return WalltimeGuard(end, margin, clock=clock, stop=stop, source="test")


def _no_query(job_id: str) -> float:
    raise AssertionError("squeue asked although SLURM_JOB_END_TIME is set")


@pytest.mark.parametrize(("env", "limit", "end", "source"), [
    ({}, None, None, None),
    ({}, 60.0, 1060.0, "--time-limit"),
    ({"SLURM_JOB_END_TIME": "1500", "SLURM_JOB_ID": "7"}, None, 1500.0, "SLURM_JOB_END_TIME"),
    ({"SLURM_JOB_END_TIME": "1500", "SLURM_JOB_ID": "7"}, 60.0, 1060.0, "--time-limit"),
    ({"SLURM_JOB_END_TIME": "1030", "SLURM_JOB_ID": "7"}, 60.0, 1030.0, "SLURM_JOB_END_TIME"),
])
def test_from_environment(env: dict[str, str], limit: float | None, end: float | None,
                          source: str | None) -> None:
    guard = WalltimeGuard.from_environment(env, limit, 10.0, clock=Clock(), query=_no_query)
    assert (guard and guard.end, guard and guard.source) == (end, source)


@pytest.mark.parametrize(("answer", "end"), [(1234.0, 1234.0), (None, None)])
def test_from_environment_asks_squeue_without_end_time(answer: float | None,
                                                       end: float | None) -> None:
    asked: list[str] = []
    guard = WalltimeGuard.from_environment(
        {"SLURM_JOB_ID": "42"}, None, clock=Clock(),
        query=lambda job: asked.append(job) or answer)
    assert asked == ["42"] and (guard.end if guard else None) == end
    assert guard is None or (guard.source, guard.margin_s) == ("squeue/scontrol for job 42",
                                                               300.0)


def test_record_keeps_the_last_five_valid_times() -> None:
    guard = _guard(Clock())
    for seconds in (100.0, 1.0, 2.0, 3.0, 4.0, 5.0, None, float("nan"), -1.0, 0.0):
        guard.record("a", 1, {"time_this_iter_s": seconds})
    guard.record("a", 1, {"loss": 0.3})
    assert guard.seconds_per_iteration("a", 1) == 3.0


@pytest.mark.parametrize(("measured", "trial", "ranks", "expected"), [
    ({}, "a", 1, None),  # 4. nothing measured
    ({("a", 1): 4.0}, "a", 1, 4.0),  # 1. its own
    ({("a", 1): 4.0}, "a", 2, 4.0),  # 2. more ranks, no ratio seen: no speed-up
    ({("a", 2): 4.0}, "a", 1, 8.0),  # 2. fewer ranks: linear slow-down
    ({("a", 1): 4.0, ("b", 1): 6.0, ("b", 2): 3.0}, "a", 2, 2.0),  # 2. b's ratio 0.5
    ({("a", 1): 4.0, ("a", 4): 1.5}, "a", 2, 4.0),  # 2. nearest: the smaller on a tie
    ({("b", 1): 4.0, ("c", 1): 6.0, ("d", 1): 10.0}, "a", 1, 6.0),  # 3. others' median
    ({("b", 1): 6.0, ("b", 2): 3.0, ("c", 1): 8.0}, "a", 2, 3.0),  # 3. pooled at 2 ranks
    ({("b", 1): 6.0, ("c", 1): 8.0}, "a", 2, 7.0),  # 3. others' median, no speed-up
])
def test_seconds_per_iteration(measured: dict[tuple[str, int], float], trial: str,
                               ranks: int, expected: float | None) -> None:
    guard = _guard(Clock())
    for (name, count), seconds in measured.items():
        guard.record(name, count, {"time_this_iter_s": seconds})
    assert guard.seconds_per_iteration(trial, ranks) == pytest.approx(expected)


@pytest.mark.parametrize(("now", "iterations", "ranks", "allowed"), [
    (900.0, 18, 1, True),  # at the start: whatever is refused now would be refused again
    (1000.0, 8, 1, True),  # 80 s needed, 80 s left before the margin
    (1000.0, 9, 1, False),
    (1000.0, 16, 2, True),  # twice as fast on 2 ranks (b's ratio)
    (1000.0, 17, 2, False),
    (1070.0, 1, 1, True),  # 10 s left
    (1071.0, 1, 1, False),
    (1000.0, 18, 1, False),  # 180 s: as long as a whole fresh allocation (200 s - 20 s)
    (1000.0, 19, 1, True),  # longer than a fresh allocation: refusing would requeue for ever
])
def test_allows(now: float, iterations: int, ranks: int, allowed: bool) -> None:
    clock = Clock(900.0)
    guard = _guard(clock)  # 200 s from 900 to 1100, margin 20: the deadline is 1080
    guard.record("a", 1, {"time_this_iter_s": 10.0})
    guard.record("b", 1, {"time_this_iter_s": 10.0})
    guard.record("b", 2, {"time_this_iter_s": 5.0})
    clock.now = now
    assert guard.allows("a", iterations, ranks) is allowed


def test_work_on_other_ranks_pays_a_restart() -> None:
    """Growing pauses the trial, places it anew and restores it: that time counts too."""
    from hpo.driver.guards.walltime import RESTART_S

    clock = Clock(900.0)
    guard = _guard(clock)  # deadline 1080
    guard.record("a", 1, {"time_this_iter_s": 10.0})
    clock.now = 1000.0  # 80 s left
    assert guard.allows("a", 8, 1)  # 80 s on its own ranks: no restart
    assert RESTART_S == 30.0 and not guard.allows("a", 8, 2)  # 80 s + a restart
    assert guard.allows("a", 5, 2)  # 50 s + 30 s
    # b moved from 1 to 2 ranks: its first result on 2 came 25 s after its last on 1,
    # with a 5 s iteration: a 20 s restart, which then counts instead of the default
    guard.record("b", 1, {"time_this_iter_s": 10.0})
    clock.now = 1025.0
    guard.record("b", 2, {"time_this_iter_s": 5.0})
    assert guard.restart_s() == 20.0
    # 55 s left; on 2 ranks a takes 5 s (b's ratio): 7 or 8 iterations, + 20 s
    assert guard.allows("a", 7, 2) and not guard.allows("a", 8, 2)


def test_allows_unmeasured_work_until_the_deadline() -> None:
    clock = Clock()
    guard = _guard(clock)
    assert guard.allows("a", 1000, 8) and not guard.exhausted()
    clock.now = 1080.0
    assert not guard.allows("a", 1, 1) and guard.exhausted()


def test_stop_run_once_with_a_line(caplog: pytest.LogCaptureFixture) -> None:
    stops: list[int] = []
    guard = _guard(Clock(1050.0), stop=lambda: stops.append(1))
    with caplog.at_level(logging.WARNING, "hpo.walltime"):
        guard.stop_run("no rung fits")
        guard.stop_run("again")
    assert stops == [1] and guard.stopped
    assert len(caplog.records) == 1
    assert "stopping 50 s before the end" in caplog.text and "no rung fits" in caplog.text


def test_pickled_guard_becomes_the_running_one() -> None:
    old, new = _guard(Clock()), _guard(Clock(), end=5000.0)
    data = pickle.dumps({"scheduler": old})
    assert pickle.loads(data)["scheduler"] is None
    with active(new):
        assert current() is new and pickle.loads(data)["scheduler"] is new
    assert current() is None


def test_active_warns_at_the_deadline() -> None:
    stops: list[float] = []
    start = time.time()
    guard = WalltimeGuard(start + 1.2, 1.0, stop=lambda: stops.append(time.time()))
    with active(guard):
        deadline = time.monotonic() + 10
        while not stops and time.monotonic() < deadline:
            time.sleep(0.02)
    assert stops and stops[0] >= start + 0.2 - 0.01, stops


def test_tune_gets_usr1_once_its_handler_is_in_place() -> None:
    """A stop before Tune's loop runs (its handler not yet installed) is not lost."""
    heard: list[int] = []
    before = signal.getsignal(signal.SIGUSR1)
    guard = WalltimeGuard(time.time() + 600, 10.0, stop=lambda: None)
    try:
        with active(guard):
            guard.stop_run("no rung fits")
            time.sleep(0.3)  # Ray still starting: nothing may be sent yet
            assert heard == []
            signal.signal(signal.SIGUSR1, lambda *_: heard.append(1))  # as Tune.fit does
            deadline = time.monotonic() + 10
            while not heard and time.monotonic() < deadline:
                time.sleep(0.02)
        assert heard == [1]
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_active_cancels_its_warning_when_the_run_ends() -> None:
    stops: list[int] = []
    guard = WalltimeGuard(time.time() + 0.5, 0.1, stop=lambda: stops.append(1))
    with active(guard):
        pass
    time.sleep(0.6)  # past the deadline: the warning must not come
    assert stops == []


# One write of a whole line (print writes its parts apart when unbuffered): the shell's trap
# echoes into the same pipe meanwhile.
_CHILD = ("import sys, time; from hpo.driver.guards.walltime import warn_batch_shell; "
          "sys.stdout.write(f'sent {warn_batch_shell()}\\n'); sys.stdout.flush(); "
          "time.sleep(0.2)")


@pytest.mark.parametrize(("trap", "job", "heard"), [
    ("trap 'echo shell got USR1' USR1", "7", ["sent True", "shell got USR1"]),  # requeue path
    ("", "7", ["sent False"]),  # a job without requeue: the shell would die of USR1
    ("trap 'echo shell got USR1' USR1", "", ["sent False"]),  # not a Slurm job
])
def test_warn_batch_shell_only_when_it_traps_usr1(trap: str, job: str,
                                                  heard: list[str]) -> None:
    script = f'{trap}\n"{sys.executable}" -c "{_CHILD}" &\nchild=$!\nwait $child\nwait $child\n'
    env = {**os.environ, "SLURM_JOB_ID": job, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=60)
    # the trap may echo before the child's line: the order is not the point
    assert sorted(done.stdout.strip().splitlines()) == sorted(heard), done.stdout + done.stderr


def test_time_limit_within_the_margin_is_refused(tmp_path: Any) -> None:
    space = tmp_path / "s.yaml"
    space.write_text("name: w\ntrainable: tests/support/study_trainables.py:steady\nmetric: score\n"
                     "mode: max\nsearch_space: {x: {uniform: [0, 1]}}\n"
                     f"storage: {tmp_path}\nslurm: {{signal_seconds: 30}}\n")
    code, _, err = cli_invoke(["run", str(space), "--time-limit", "30"])
    assert code == 2, err
    assert "--time-limit: must be longer than slurm.signal_seconds (30 s)" in err
    assert "Hint: raise the limit or lower slurm.signal_seconds" in err
    assert not (tmp_path / "w").exists()
