"""An actor Tune keeps for reuse goes to a trial still waiting for resources, never to one whose
own actor is starting (hpo.ray_adapters.tune_actors.cached_actors_to_waiting_trials). Tune's own
choice stopped the starting actor, and the resources it freed started another for the next
trial: where a worker starts more slowly than a trial runs, Tune kept starting processes and
stopping them before their first trial."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from calls import ROOT, SUPPORT, trial_rows

pytestmark = pytest.mark.usefixtures("speed_patches_on")  # tests a speed patch itself

TRIALS = 6


def test_every_worker_started_for_a_trial_runs_one(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    seen.mkdir()
    spec = {"name": "reuse", "trainable": "slow_start_trainables:quick", "metric": "score",
            "mode": "max", "num_samples": TRIALS, "max_concurrent": 2,
            "resources": {"cpus_per_trial": 1}, "search_space": {"x": {"uniform": [0, 1]}}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "HPO_TEST_WORKERS_SEEN": str(seen),
           "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "hpo", "run", str(tmp_path / "space.yaml"),
                           "--storage", str(tmp_path), "--cpus", "2"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = trial_rows(tmp_path / "reuse")
    assert [[row["training_iteration"] for row in trial] for trial in rows.values()] \
        == [[1, 2]] * TRIALS
    loaded = sorted(path.name.split("-")[1] for path in seen.glob("loaded-*"))
    ran = sorted(path.name.split("-")[1] for path in seen.glob("ran-*"))
    # the first worker runs trials while the second starts; the second runs the trial that
    # waited for it; no third process was started (and stopped before its first trial)
    assert len(loaded) == 2
    assert ran == loaded
