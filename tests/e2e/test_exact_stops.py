"""A stop at any instant, then `hpo resume`: every trial's history is exactly 1..N, once each.

The stops are injected at exact instants (tests/support/stop_points.py): after a trial's result row
is written and before Tune registers the checkpoint reported with it, where a stop used to leave
`[1, 2, 3, 4, 5, 5, 6, ...]`. Histories are compared as lists, never as sets.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import pytest
from calls import ROOT, SUPPORT, trial_rows
from exact_histories import EXACT, STEPS, assert_exact
from stop_points import SPEC, StopAt

import hpo
from hpo.driver.guards.history import cut_after, fill_upto
from hpo.driver.guards.start_stop import StoppedAtStart, ray_starts, start_stops, tune_takes_over
from hpo.driver.guards.stops import _NAMES, HeldStop, signals_restored, stopped_by
from hpo.errors import RunError


@pytest.mark.slow
@pytest.mark.parametrize(("signame", "group"), [("SIGINT", True), ("SIGTERM", False),
                                                ("SIGUSR1", False)])
def test_stop_between_row_and_checkpoint_then_resume_is_exact(
        tmp_path: Path, signame: str, group: bool) -> None:
    """Ctrl+C (to the process group, as a terminal sends it), SIGTERM and USR1: one line with
    the resume hint, the last frame shows the unfinished trials, well within 30 s."""
    storage = tmp_path / "results"
    command = [sys.executable, str(SUPPORT / "stop_points.py"),
               str(storage), "s", signame, "1", "4", *(["--group"] if group else [])]
    env = {**os.environ, "PYTHONPATH": str(SUPPORT), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, start_new_session=True)
    ended = time.time()
    fired = storage / "s.fired"
    assert fired.exists(), done.stderr[-2000:]
    assert ended - fired.stat().st_mtime < 30
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1, done.stderr[-2000:]
    assert last.startswith(f"hpo: the run stopped by {signame}"), last
    assert f"`hpo resume {storage / 's'}` continues it" in last
    assert f"stopped by {signame}" in done.stderr and "trial(s) unfinished" in done.stderr
    # one count: the error line, and the live view's last frame where it drew one, say the same
    counts = re.findall(r"(\d+) trial\(s\) unfinished \((\d+) had started, (\d+) had not\)",
                        done.stderr)
    assert counts and len(set(counts)) == 1, counts
    assert "Traceback" not in done.stderr

    resumed = subprocess.run([sys.executable, "-m", "hpo", "resume", str(storage / "s")],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_exact(storage / "s")


@pytest.mark.slow
def test_rows_after_the_last_checkpoint_are_cut_on_resume(tmp_path: Path) -> None:
    """checkpoint.frequency 15: a stop at step 18 resumes from step 15; steps 16-18 (and any the
    trial sent in the same batch of results after 18, hpo.trial.batched) are reported again,
    and the history keeps them once. A batch ends by time (BATCH_S, 10 steps of 0.1 s) before
    the checkpoint at 30, so rows past 15 are on disk when the stop lands; 40 steps, so the
    trial is still running then."""
    marker = tmp_path / "fired"
    spec = {**SPEC, "name": "f", "num_samples": 1, "checkpoint": {"frequency": 15, "keep": 1},
            "constants": {**SPEC["constants"], "steps": 40}}
    with pytest.raises(RunError, match="stopped by SIGUSR1"):
        hpo.run(spec, storage=str(tmp_path), keep_ray=True,
                callbacks=[StopAt(signal.SIGUSR1, 0, 18, str(marker))])
    before = [r["training_iteration"] for r in next(iter(trial_rows(tmp_path / "f").values()))]
    assert before == list(range(1, len(before) + 1)) and 18 <= len(before) < 30
    hpo.resume(tmp_path / "f", keep_ray=True)
    assert_exact(tmp_path / "f", trials=1, exact=list(range(1, 41)))
    cut = len(before) - 15
    assert f"restarts from its checkpoint at iteration 15: {cut} row(s) of result.json" in (
        tmp_path / "f" / "hpo.log").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("keep", [2, 1])
def test_rows_a_lagging_storage_copy_lacks_come_back_from_the_kept_checkpoints(
        tmp_path: Path, keep: int) -> None:
    """A killed driver: Tune copies its staging folder to the experiment folder in the
    background while it rewrites the experiment state, so the state can know checkpoint 5
    while the copied result.json ends before it (seen once: [2, 3, ..., 8] after a SIGKILL).
    Injected exactly: a stop at step 6 (the stop waits for its checkpoint: 6 is kept, and 5
    with keep 2), then the trial's files cut back to step 4, as a lagging copy leaves them."""
    spec = {**SPEC, "name": "lag", "num_samples": 1,
            "checkpoint": {"frequency": 1, "keep": keep}}
    with pytest.raises(RunError, match="stopped by SIGUSR1"):
        hpo.run(spec, storage=str(tmp_path), keep_ray=True,
                callbacks=[StopAt(signal.SIGUSR1, 0, 6, str(tmp_path / "fired"))])
    (trial_dir,) = [path.parent for path in (tmp_path / "lag").glob("*/result.json")]
    for name in ("result.json", "progress.csv"):
        cut_after(trial_dir / name, 4)
    # in a new process, as after a kill: this one's Ray still holds the staging copy
    env = {**os.environ, "PYTHONPATH": str(SUPPORT)}  # StopAt is pickled with it
    resumed = subprocess.run([sys.executable, "-m", "hpo", "resume", str(tmp_path / "lag")],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = (tmp_path / "lag" / "hpo.log").read_text()
    if keep == 2:
        assert_exact(tmp_path / "lag", trials=1)
        assert "result.json lacked the row(s) of iteration(s) 5, 6" in log
        return
    rows = [r["training_iteration"] for r in next(iter(trial_rows(tmp_path / "lag").values()))]
    assert rows == [1, 2, 3, 4, *range(6, STEPS + 1)]  # row 5 is nowhere: said, not hidden
    assert "the row(s) of iteration(s) 5 are missing from result.json" in log


def test_fill_upto_appends_kept_rows_in_the_files_format(tmp_path: Path) -> None:
    import json

    kept = [{"training_iteration": i, "score": i / 10, "config": {"x": 1}, "nested": {"a": i}}
            for i in (3, 4)]
    result = tmp_path / "result.json"
    result.write_text('{"training_iteration": 1}\n{"training_iteration": 2}\n')
    fill_upto(result, 4, kept, "t")
    assert [json.loads(line) for line in result.read_text().splitlines()][2:] == kept
    progress = tmp_path / "progress.csv"
    progress.write_text("training_iteration,score,nested/a\n1,0.1,1\n")
    fill_upto(progress, 4, kept, "t")  # iteration 2 is nowhere
    assert progress.read_text() == "training_iteration,score,nested/a\n1,0.1,1\n3,0.3,3\n4,0.4,4\n"
    empty = tmp_path / "empty.csv"
    fill_upto(empty, 3, kept, "t")
    assert empty.read_text() == "training_iteration,score,nested/a\n3,0.3,3\n"
    fill_upto(empty, 3, kept, "t")  # nothing lacking: unchanged
    assert empty.read_text() == "training_iteration,score,nested/a\n3,0.3,3\n"


# 12 stop points: each of the 12 steps once (7 and 12 are coprime), spread over the 4 trials
# (in start order, 3 points each) and the 3 signals (4 each).
SWEEP = [(i % 4, 1 + (i * 7) % STEPS, (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)[i % 3])
         for i in range(STEPS)]


def test_the_sweep_stops_at_every_step() -> None:
    assert sorted(step for _, step, _ in SWEEP) == EXACT
    assert sorted(trial for trial, _, _ in SWEEP) == sorted(list(range(4)) * 3)


@pytest.mark.slow
def test_a_stop_at_every_step_resumes_exactly(tmp_path: Path) -> None:
    """4 trials x 12 steps, stopped once at each step (over trials and signals) and resumed:
    12/12 exact."""
    inexact = []
    for i, (trial, step, signum) in enumerate(SWEEP):
        name = f"sweep{i}"
        stop = StopAt(signum, trial, step, str(tmp_path / f"{name}.fired"))
        with pytest.raises(RunError, match="stopped by"):
            hpo.run({**SPEC, "name": name}, storage=str(tmp_path), keep_ray=True,
                    callbacks=[stop])
        hpo.resume(tmp_path / name, keep_ray=True)
        try:
            assert_exact(tmp_path / name)
        except AssertionError as exc:
            inexact.append(f"{name} ({trial}, {step}, {signum.name}): {exc}")
    assert not inexact, "\n".join(inexact)


@pytest.mark.parametrize(("text", "last", "kept", "dropped"), [
    ('{"training_iteration": 1}\n{"training_iteration": 2}\n{"training_iteration": 3}\n',
     2, [1, 2], 1),
    ('{"training_iteration": 1}\n{"training_iteration": 2}\n{"training_it', 5, [1, 2], 1),
    ('{"training_iteration": 1}\n', 0, [], 1),
    ('{"training_iteration": 1}\n{"training_iteration": 2}\n', 2, [1, 2], 0),
])
def test_cut_result_json(tmp_path: Path, text: str, last: int, kept: list[int],
                         dropped: int) -> None:
    path = tmp_path / "result.json"
    path.write_text(text)
    assert cut_after(path, last) == dropped
    import json

    assert [json.loads(line)["training_iteration"] for line in
            path.read_text().splitlines()] == kept


def test_cut_progress_csv_keeps_the_header(tmp_path: Path) -> None:
    path = tmp_path / "progress.csv"
    path.write_text("score,training_iteration\n0.1,1\n0.2,2\n0.3,3\n")
    assert cut_after(path, 1) == 2
    assert path.read_text() == "score,training_iteration\n0.1,1\n"
    assert cut_after(tmp_path / "missing.csv", 1) == 0


class _Trial:
    def __init__(self, saving: bool) -> None:
        self.is_saving = saving


def test_a_stop_waits_for_checkpoints_in_flight_then_reaches_tune() -> None:
    """The hold as Tune's controller drives it: passed on once no trial is saving; a second
    signal, or the grace's end, passes it at once; the process's handlers come back after."""
    passed: list[int] = []
    before = signal.getsignal(signal.SIGTERM)
    with signals_restored():
        signal.signal(signal.SIGUSR1, lambda signum, frame: passed.append(signum))
        stop = HeldStop(grace_s=60)
        stop.setup()
        assert signal.getsignal(signal.SIGTERM) == stop._on_signal
        signal.raise_signal(signal.SIGUSR1)
        stop.on_step_end(1, [_Trial(True), _Trial(False)])
        assert passed == []  # a checkpoint is in flight
        stop.on_step_end(2, [_Trial(False)])
        assert passed == [signal.SIGUSR1] and stopped_by() == "SIGUSR1 (walltime warning)"
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)  # Ctrl+C twice: no more waiting
        assert passed == [signal.SIGUSR1, signal.SIGINT]
        signal.raise_signal(signal.SIGTERM)
        stop._held = (signal.SIGTERM, None, time.monotonic() - 1)  # its grace is over
        stop.on_step_end(3, [_Trial(True)])
        assert passed[-1] == signal.SIGTERM and stopped_by() == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_stop_that_lands_where_python_only_prints_it_is_raised_at_the_next_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CI once saw Ctrl+C land inside the import lock's weakref callback: Python printed
    "Exception ignored in ... Traceback" and went on. The stop ends the start-up at the next
    check (before Ray starts) with its one line, and nothing is printed."""
    printed: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", printed.append)  # what Python would print

    class Held:
        pass

    with signals_restored(), pytest.raises(StoppedAtStart, match="SIGINT"), start_stops():
        held = Held()
        ref = weakref.ref(held, lambda _: signal.raise_signal(signal.SIGINT))
        del held  # the callback runs: the stop raises inside it, and Python swallows it
        assert ref() is None
        ray_starts()
    assert printed == []
    assert sys.unraisablehook == printed.append  # put back
    _ = weakref.ref(Held(), lambda _: 1 / 0)  # other errors there are printed as before
    assert [u.exc_type for u in printed] == [ZeroDivisionError]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_while_tunes_loop_starts_is_held_and_reaches_tune(signum: int) -> None:
    """Between hpo's start-up handlers and Tune's own (Tune's loop starting): the stop is
    noted, not the default action (SIGTERM's ended the process unsaved, SIGINT's raised
    inside Tune's set-up), and HeldStop passes it to Tune once the loop runs."""
    passed: list[int] = []
    before = signal.getsignal(signal.SIGTERM)
    with signals_restored():
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, as in `hpo`
        with start_stops():
            tune_takes_over()
            ours = signal.getsignal(signal.SIGINT)
            signal.raise_signal(signum)  # still here: noted
            signal.signal(signal.SIGUSR1, lambda sig, frame: passed.append(sig))  # Tune's
            stop = HeldStop(grace_s=60)
            stop.setup()
            stop.on_step_end(1, [_Trial(False)])
            assert passed == [signum] and stopped_by() == _NAMES[signum]
            stop.on_step_end(2, [_Trial(False)])
            assert passed == [signum]  # once
            # Tune puts back the handler it found (hpo's) once it acts on the stop: a second
            # Ctrl+C then still ends the process, as Tune's own warning says
            signal.signal(signal.SIGINT, ours)
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) == before
