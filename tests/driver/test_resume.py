"""`hpo resume` after the driver was SIGKILLed: finished trials are kept as they were,
unfinished ones continue from their checkpoints, and the total is exactly num_samples; the
killed run's /tmp folder is cleared by the next run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from calls import ROOT, command_lines, hpo_cli, trial_rows
from stop_points import SPEC as STOP_SPEC
from stop_points import StopAt

from hpo.cluster.run_dir import OWNER_FILE
from hpo.errors import ExperimentError
from hpo.results import load_results

SPEC = """
name: killed
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
num_samples: 6
max_concurrent: 2
search_space:
  x: {uniform: [0.0, 1.0]}
constants: {steps: 8, sleep: 0.5}
search: {type: random, seed: 3}
checkpoint: {frequency: 1, keep: 1}
"""


def _wait_for_progress(exp_dir: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until the snapshot shows >= 2 finished trials and a running one with a checkpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        try:
            frame = load_results(exp_dir)
        except ExperimentError:
            frame = None
        if frame is not None and not frame.empty:
            done = (frame["status"] == "TERMINATED").sum()
            running = frame[(frame["status"] == "RUNNING") & (frame["iterations"] >= 2)]
            if done >= 2 and len(running):
                return
        time.sleep(0.2)
    pytest.fail("the experiment made no progress before the timeout")


def _start_run(tmp_path: Path, **popen: Any) -> tuple[subprocess.Popen, Path]:
    """Start `hpo run` on SPEC in the background; return the process and experiment folder."""
    space = tmp_path / "killed.yaml"
    space.write_text(SPEC)
    proc = subprocess.Popen([sys.executable, "-m", "hpo", "run", str(space), "--storage",
                             str(tmp_path / "results")], cwd=ROOT, **popen)
    return proc, tmp_path / "results" / "killed"


@pytest.mark.slow
def test_resume_after_sigkill(tmp_path: Path) -> None:
    proc, exp_dir = _start_run(tmp_path, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_progress(exp_dir, proc)
        left_behind = _run_dir_of(proc.pid)
        proc.kill()  # the driver alone, as the OOM killer would: Ray's processes follow it
        proc.wait()
        _wait_until_gone(left_behind)
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever is left, on a failure
            os.killpg(proc.pid, signal.SIGKILL)
    assert left_behind.exists()  # a killed driver cannot clean up
    before = load_results(exp_dir).set_index("trial_id")
    finished = before[before["status"] == "TERMINATED"]
    interrupted = before[before["status"] == "RUNNING"].index

    done = hpo_cli("resume", str(exp_dir))
    assert done.returncode == 0, done.stdout + done.stderr

    after = load_results(exp_dir).set_index("trial_id")
    assert len(after) == 6 and set(after["status"]) == {"TERMINATED"}
    kept = after.loc[finished.index]
    assert kept["best_score"].tolist() == finished["best_score"].tolist()
    assert kept["iterations"].tolist() == finished["iterations"].tolist()
    assert kept["config/x"].tolist() == finished["config/x"].tolist()
    assert (after["iterations"] == 8).all()
    # Each trial's history holds every step once, in order: the rows a killed driver wrote
    # after a trial's last checkpoint were cut when it restarted from that checkpoint.
    for name, reports in trial_rows(exp_dir).items():
        assert [r["training_iteration"] for r in reports] == list(range(1, 9)), name
    # Interrupted trials went on from a checkpoint, not from step 1.
    resumed_at = [_last(after.loc[t, "path"], "resumed_at") for t in interrupted]
    assert resumed_at and all(step > 1 for step in resumed_at), resumed_at
    assert not left_behind.exists()  # the killed run's Ray files, removed by the resume


def _wait_until_gone(run_dir: Path, timeout: float = 60) -> None:
    """Until no process runs from the killed run's folder (Ray ties its processes to the
    driver's life: Linux's parent-death signal)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [line for line in command_lines() if str(run_dir) in line]
        if not alive:
            return
        time.sleep(0.2)
    pytest.fail(f"Ray processes outlived the killed driver: {alive}")


def _run_dir_of(pid: int) -> Path:
    """The temp folder of the embedded Ray of the driver with this pid (it has this
    process's $TMPDIR)."""
    from hpo.cluster.temp_dir import temp_parent

    owned = [owner.parent for owner in temp_parent().glob(f"hpo-*/{OWNER_FILE}")
             if owner.read_text().split()[0] == str(pid)]
    assert len(owned) == 1, owned
    return owned[0]


@pytest.mark.slow
def test_ctrl_c_stops_with_a_resume_hint(tmp_path: Path) -> None:
    proc, exp_dir = _start_run(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        _wait_for_progress(exp_dir, proc)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1
    last = stderr.strip().splitlines()[-1]
    assert "trial(s) unfinished" in last and f"hpo resume {exp_dir}" in last
    assert "Traceback" not in stderr
    interrupted = load_results(exp_dir).query("status == 'RUNNING'")["path"].tolist()

    done = hpo_cli("resume", str(exp_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    # The output of both parts of an interrupted trial is kept: the resumed part ran in a
    # fresh working dir, whose copy would have replaced the first part's.
    assert interrupted
    for trial_dir in map(Path, interrupted):
        first = (trial_dir / "stdout.1").read_text()
        assert "step 1\n" in first and "step 8\n" not in first
        assert "step 8\n" in (trial_dir / "stdout").read_text()


def _last(trial_dir: str, key: str) -> int:
    import json

    lines = (Path(trial_dir) / "result.json").read_text().splitlines()
    return json.loads(lines[-1])[key]


def test_a_saved_data_parallel_spec_loads_again_for_resume() -> None:
    """hpo-spec.yaml of a distributed experiment once held the default `resources:`, which
    validation refuses beside `distributed:`: every requeue or `hpo resume` of one failed."""
    from hpo.driver.run.runner import _portable
    from hpo.spec.load import spec_from_dict

    spec = spec_from_dict({"name": "dp", "trainable": "trainables.images:train",
                           "metric": "val_loss", "mode": "min",
                           "distributed": {"backend": "ddp", "workers": 2}})
    again = spec_from_dict(_portable(spec), source="hpo-spec.yaml")
    assert again.distributed == spec.distributed and "resources" not in _portable(spec)


@pytest.mark.slow
def test_resuming_a_finished_study_says_so_without_ray(tmp_path: Path) -> None:
    space = tmp_path / "done.yaml"
    space.write_text(f"""\
name: done
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
num_samples: 2
search_space: {{x: {{uniform: [0.0, 1.0]}}}}
constants: {{steps: 2, sleep: 0.0}}
storage: {tmp_path}
""")
    ran = hpo_cli("run", str(space))
    assert ran.returncode == 0, ran.stderr[-2000:]
    exp_dir = tmp_path / "done"
    log_before = (exp_dir / "hpo.log").read_bytes()
    again = hpo_cli("resume", str(exp_dir))
    assert again.returncode == 0 and again.stdout == "", again.stderr
    line = again.stderr.strip()
    assert "\n" not in line and line.startswith(f"hpo: {exp_dir} has finished"), line
    assert "best: none yet" not in again.stderr
    assert (exp_dir / "hpo.log").read_bytes() == log_before  # no Ray: nothing more logged


@pytest.mark.ray
def test_the_live_view_best_after_resume_counts_the_trials_before_the_stop(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Trials x=0.9 and 0.8 finish, the stop lands on the third's first report, the resume
    finishes the worse two: the last frame's best is x=0.9's, as in the table (it named the
    best of the trials that ran after the resume)."""
    import hpo

    spec = {**STOP_SPEC, "name": "seeded", "search": {"type": "grid"}, "max_concurrent": 1,
            "num_samples": 1,
            "search_space": {"x": {"choice": [0.9, 0.8, 0.1, 0.2]}},
            "constants": {"steps": 3, "sleep": 0.0}}
    with pytest.raises(hpo.RunError, match="stopped by SIGUSR1"):
        hpo.run(spec, storage=str(tmp_path), num_cpus=2,
                callbacks=[StopAt(signal.SIGUSR1, 2, 1, str(tmp_path / "fired"))])
    capfd.readouterr()
    result = hpo.resume(tmp_path / "seeded", num_cpus=2)
    best = result.dataframe.iloc[0]
    assert (best["config/x"], best["best_score"]) == (0.9, pytest.approx(2.7))
    frames = capfd.readouterr().err
    assert f"best score 2.7 (trial {best['trial_id']})" in frames, frames[-2000:]
