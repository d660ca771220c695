"""The walltime guard on the tests' real Slurm (testing/slurm_cluster.py): the allocation's
end read from squeue inside a job, and a run that stops at its end minus the checkpoint margin
with its state saved, requeues through the sbatch script's walltime path and finishes after.

Slurm's shortest time limit (1 min) would make these tests long and its own warning come at
an unknown moment up to a minute early, so the experiment's job keeps a 20 min limit and its
set-up line exports SLURM_JOB_END_TIME (as newer Slurm sets it) 35 s after its first start;
the requeued run reads the real end from squeue and finishes.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from calls import ROOT, trial_rows
from slurm_jobs import DP_TRAINABLES, _finished, _job, _output, _space, _submit

from hpo.results import load_results
from testing.slurm_cluster import SlurmTestCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

_PRINT_GUARD = ("import os; from hpo.driver.guards.walltime import WalltimeGuard as G; "
                "g = G.from_environment(margin_s=5); "
                "print('SET', os.environ.get('SLURM_JOB_END_TIME')); print('END', g.end); "
                "print('SOURCE', g.source)")


def _batch_output(slurm: SlurmTestCluster, args: list[str], timeout: float = 60) -> str:
    """Run a small batch job to its end (sbatch --wait) and return its output."""
    out = slurm.root / "work" / f"guard-{time.monotonic_ns()}.out"
    done = subprocess.run(["sbatch", "--wait", "--parsable", f"--output={out}", *args],
                          env=slurm.env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr + (
        out.read_text() if out.exists() else "")
    return out.read_text()


def _finished_after_requeue(slurm: SlurmTestCluster, job_id: str,
                            timeout: float = 300) -> str:
    """The output once the requeued run has started and ended: right after `scontrol
    requeue` the job passes through COMPLETING, which alone would look finished."""
    deadline = time.monotonic() + timeout
    while "hpo: resuming" not in _output(job_id):
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} never resumed after a requeue\n{_output(job_id)}")
        time.sleep(0.5)
    return _finished(slurm, job_id)


def test_the_allocation_end_comes_from_squeue(slurm: SlurmTestCluster) -> None:
    text = _batch_output(slurm, ["-t", "3", "--wrap",
                                 f"{sys.executable} -c \"{_PRINT_GUARD}\"; "
                                 "scontrol show job $SLURM_JOB_ID"])
    found = dict(re.findall(r"^(SET|END|SOURCE) (.*)$", text, re.MULTILINE))
    start, end = re.search(r"StartTime=(\S+) EndTime=(\S+)", text).groups()
    from hpo.driver.guards.walltime import parse_end_time

    # Slurm 22.05 does not set SLURM_JOB_END_TIME: squeue answers (newer Slurm sets it).
    assert found["SET"] == "None" and found["SOURCE"].startswith("squeue/scontrol"), text
    assert float(found["END"]) == parse_end_time(end) == parse_end_time(start) + 180, text


def test_run_stops_at_the_end_minus_the_margin_requeues_and_finishes(
        slurm: SlurmTestCluster, outputs: list[str]) -> None:
    # Two 30 s trials side by side cannot fit into the first start's 27 s (35 s - the margin,
    # Ray's start included; at 45 s an idle machine finished them in time): both are
    # running, with checkpoints, when the guard stops them.
    first = ('if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then '
             'export SLURM_JOB_END_TIME=$(( $(date +%s) + 35 )); fi')
    space = _space(slurm, "deadline", nodes=1, samples=2, steps=30, sleep=1.0,
                   extra="max_concurrent: 2\n", slurm_extra=f"  setup: ['{first}']\n")
    space.write_text(space.read_text().replace("signal_seconds: 60", "signal_seconds: 8"))
    job_id = _submit(slurm, space)
    outputs.append(job_id)
    out = _finished_after_requeue(slurm, job_id)
    assert _job(slurm, job_id)["Restarts"] == "1", out
    # The guard warned (not Slurm, 20 min away): the batch shell's trap stopped and requeued.
    stops = re.findall(r"hpo: walltime: stopping (\d+) s before the end \(\S+, from "
                       r"SLURM_JOB_END_TIME\)", out)
    assert len(stops) == 1 and 0 <= int(stops[0]) <= 8, out
    assert f"requeueing job {job_id}" in out and "hpo: resuming" in out, out
    exp_dir = slurm.root / "work/results/deadline"
    frame = load_results(exp_dir)
    assert len(frame) == 2 and set(frame["status"]) == {"TERMINATED"}, frame
    assert (frame["iterations"] == 30).all()
    rows = trial_rows(exp_dir)
    # Some trial went on from its saved checkpoint after the requeue, none started over.
    assert any(r[-1]["resumed_at"] > 1 for r in rows.values()), [
        (r[0]["resumed_at"], r[-1]["resumed_at"]) for r in rows.values()]
    for reports in rows.values():
        steps = [r["training_iteration"] for r in reports]
        assert steps == list(range(1, 31)), steps  # each once, in order


def test_rasda_holds_a_rung_that_would_not_fit_requeues_and_grows_after(
        slurm: SlurmTestCluster, outputs: list[str]) -> None:
    # One trial, rungs at 5 and 10 (max_t), 1 -> 2 ranks, 12 s of work a step on one rank
    # (half that on two), the first end 120 s after the set-up line, its margin 8 s (the
    # deadline: 112 s). Rung 5 comes at u + v + 60 s (u: until the driver's guard starts, v:
    # the ranks' start). There the guard estimates the 5 steps left at 60 s on 1 rank, more
    # than the 52 - u - v s left, and at 90 s on 2 ranks (no speed-up assumed before one is
    # measured, plus a 30 s restart), which is no more than the guard's whole allocation
    # (112 - u s; work beyond that it lets run, as no requeue could fit it) while u <= 22 s:
    # neither fits, so the trial holds on rung 5's checkpoint, and with nothing else to run
    # the scheduler stops the run for the requeue (rung 5 comes before the deadline while
    # u + v < 52 s). The window is 30 s wide because a step's 12 s, five times over, outweighs
    # the 30 s restart; at 7 s a step it was 5 s wide, and a start a little slower or quicker
    # let the trial grow, or go on on 1 rank, and finish in the first job.
    first = ('if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then '
             'export SLURM_JOB_END_TIME=$(( $(date +%s) + 120 )); fi')
    space = _space(slurm, "rasda-hold", nodes=1, samples=1, steps=10, sleep=12.0, extra=(
        "scheduler: {type: rasda, max_t: 10, grace_period: 5, reduction_factor: 2}\n"
        "distributed: {backend: ddp, workers: 1, max_workers: 2, cpus_per_worker: 1}\n"),
        slurm_extra=f"  setup: ['{first}']\n")
    text = space.read_text().replace("tests/support/study_trainables.py:steady",
                                     f"{DP_TRAINABLES}:paced")
    space.write_text(text.replace("signal_seconds: 60", "signal_seconds: 8"))
    job_id = _submit(slurm, space)
    outputs.append(job_id)
    out = _finished_after_requeue(slurm, job_id)
    exp_dir = slurm.root / "work/results/rasda-hold"
    (reports,) = trial_rows(exp_dir).values()
    seen = [(r["training_iteration"], r["start"], r["ranks"], round(r["time_this_iter_s"], 1),
             r["timestamp"]) for r in reports]
    # The scheduler stopped the run, not the guard's clock at the end minus the margin ...
    assert re.search(r"hpo: walltime: stopping \d+ s before the end \(\S+, from "
                     r"SLURM_JOB_END_TIME\): no rung fits before the allocation ends", out), (
        seen, out)
    assert _job(slurm, job_id)["Restarts"] == "1", out
    assert f"requeueing job {job_id}" in out and "hpo: resuming" in out, out
    # ... with the trial held on rung 5: the first start's steps end there; the requeued run
    # went on from its checkpoint, every step once, on the 2 ranks it had grown to.
    assert [r["training_iteration"] for r in reports] == list(range(1, 11)), seen
    assert [r["start"] for r in reports] == [1] * 5 + [6] * 5, seen
    assert [r["ranks"] for r in reports] == [1] * 5 + [2] * 5, seen
    frame = load_results(exp_dir)
    assert list(frame["status"]) == ["TERMINATED"] and list(frame["iterations"]) == [10], frame
