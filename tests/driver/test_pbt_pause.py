"""A trial paused without a save while its pause's save is in flight, as synch PBT's exploit
pauses the trials that reached the sync point first, resumes and runs to its end
(hpo.ray_adapters.tune_fit.no_stop_left_by_a_pause). In Tune 2.60 the dropped save left a
STOP queued, which ended the resumed trial at its first save; synch PBT then waited for it
forever (ray-project/ray#57906)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import ray.cloudpickle
from ray import tune
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from hpo.driver.backends.ray_session import embedded_ray
from hpo.ray_adapters.tune_fit import no_stop_left_by_a_pause

STEPS = 5


class Saving(tune.Trainable):
    """Trial "a" blocks its save after step 2 until the scheduler paused it mid-save; trial
    "b" reports from then on."""

    def setup(self, config: dict[str, Any]) -> None:
        self.value = 0
        self.marks = Path(config["marks"])

    def step(self) -> dict[str, Any]:
        time.sleep(0.05)
        if self.config["role"] == "b":
            _wait_for(self.marks / "saving")  # its result comes while "a" saves
        self.value += 1
        done = self.config["role"] == "b" and (self.marks / "paused-mid-save").exists()
        return {"value": self.value, "done": done}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        if self.config["role"] == "a" and self.value == 2 and not (self.marks / "saving").exists():
            (self.marks / "saving").touch()
            _wait_for(self.marks / "paused-mid-save")  # the pause below stops this actor
        return {"value": self.value}

    def load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.value = checkpoint["value"]


def _wait_for(path: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for a file another process writes


class PausesMidSave(FIFOScheduler):
    """Pauses "a" with a save at step 2, then, at a result of "b" while that save is in
    flight, pauses it again without one: PBT's exploit (pbt.py, _exploit)."""

    def __init__(self, marks: Path) -> None:
        super().__init__()
        self.marks = marks

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        if trial.config["role"] == "a" and result["training_iteration"] == 2 \
                and not (self.marks / "saving").exists():
            return TrialScheduler.PAUSE
        (a,) = [t for t in tune_controller.get_trials() if t.config["role"] == "a"]
        if trial is not a and a.is_saving and not (self.marks / "paused-mid-save").exists():
            tune_controller.pause_trial(a, should_checkpoint=False)
            (self.marks / "paused-mid-save").touch()
        return TrialScheduler.CONTINUE


def test_a_trial_paused_mid_save_resumes_and_runs_to_its_end(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import it
    tuner = tune.Tuner(
        Saving, param_space={"role": tune.grid_search(["a", "b"]), "marks": str(marks)},
        tune_config=tune.TuneConfig(scheduler=PausesMidSave(marks)),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), verbose=0, stop={"training_iteration": STEPS},
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1)))
    with embedded_ray(tmp_path / "ray.log", num_cpus=2), no_stop_left_by_a_pause():
        results = tuner.fit()
    assert (marks / "paused-mid-save").exists()  # the pause did land mid-save
    (a,) = [result for result in results if result.config["role"] == "a"]
    assert a.metrics["training_iteration"] == STEPS, a.metrics  # not ended at its next save
