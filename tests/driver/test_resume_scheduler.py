"""A resume keeps the scheduler's decisions (hpo.ray_adapters.scheduler_state): ASHA's rung
records ride in Tune's snapshot, so a study stopped and resumed decides as the uninterrupted
one does, where arrivals are ordered by construction (a grid, one trial at a time); the
schedulers whose state is not carried are named in one line."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from ray.tune import Callback
from stop_points import StopAt

import hpo

# score = x * step. Grid order 4, 3, 5, 2; rungs at 1, 2, 4, max_t 8. Uninterrupted: 4 runs to
# 8; 3 stops at 1 (below 4); 5 runs to 8; 2 stops at 1 (below the median of 4, 3, 5). Stopped
# while 5 runs (iteration 6) and resumed without the rungs, 2 would meet empty rungs 1 and 2
# and stop only at 4.
SPEC: dict[str, Any] = {
    "trainable": "tests/support/study_trainables.py:steady", "metric": "score", "mode": "max",
    "search_space": {"x": {"grid": [4, 3, 5, 2]}}, "constants": {"steps": 8, "sleep": 0.0},
    "search": {"type": "grid"}, "max_concurrent": 1,
    "scheduler": {"type": "asha", "max_t": 8, "grace_period": 1, "reduction_factor": 2},
    "checkpoint": {"frequency": 1, "keep": 1},
}


class Reports(Callback):
    """Appends "x iteration" for every result Tune hands the scheduler, to a file (kept by
    the stopped run and its resume alike: Tune stores callbacks with the experiment)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        with open(self.path, "a") as file:
            file.write(f"{trial.trial_id} {result['training_iteration']}\n")


def _ends(frame: Any) -> dict[float, int]:
    return {float(x): int(n) for x, n in zip(frame["config/x"], frame["iterations"], strict=True)}


def _stopped_and_resumed(spec: dict[str, Any], tmp_path: Path, name: str, trial: int,
                         iteration: int, once: bool = True) -> Any:
    """The study stopped (SIGUSR1) when its trial started `trial`-th reports `iteration`,
    then resumed; with `once`, each result is handed to the scheduler once across both (PBT
    sends a clone back to its source's steps)."""
    fired, seen = tmp_path / f"{name}.fired", tmp_path / f"{name}.seen"
    with pytest.raises(hpo.RunError, match="stopped by SIGUSR1"):
        hpo.run({**spec, "name": name}, storage=str(tmp_path), num_cpus=2,
                callbacks=[StopAt(signal.SIGUSR1, trial, iteration, str(fired)),
                           Reports(str(seen))])
    resumed = hpo.resume(tmp_path / name, num_cpus=2)
    assert fired.read_text().split()[1] == str(iteration)
    lines = seen.read_text().splitlines()
    assert len(lines) == len(set(lines)) or not once  # no result seen twice: none judged twice
    return resumed


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """(trial ID, rung) of each score an ASHA bracket records: once a trial is judged there."""
    from ray.tune.schedulers.async_hyperband import _Bracket

    records: list[tuple[str, float]] = []
    original = _Bracket.on_result

    def on_result(self: Any, trial: Any, cur_iter: int, cur_rew: float | None) -> str:
        before = {(t, m) for m, recorded in self._rungs for t in recorded}
        action = original(self, trial, cur_iter, cur_rew)
        records.extend({(t, m) for m, recorded in self._rungs for t in recorded} - before)
        return action

    monkeypatch.setattr(_Bracket, "on_result", on_result)
    return records


@pytest.mark.parametrize("trial, iteration", [(2, 6), (0, 5)])
def test_a_resumed_asha_decides_as_the_uninterrupted_one(
        tmp_path: Path, judged: list[tuple[str, float]], trial: int, iteration: int) -> None:
    whole = hpo.run({**SPEC, "name": "whole"}, storage=str(tmp_path), num_cpus=2)
    assert _ends(whole.dataframe) == {4.0: 8, 3.0: 1, 5.0: 8, 2.0: 1}
    judged.clear()
    resumed = _stopped_and_resumed(SPEC, tmp_path, "stopped", trial, iteration)
    assert _ends(resumed.dataframe) == _ends(whole.dataframe)
    assert set(_ends(resumed.dataframe).values()) <= {1, 2, 4, 8}  # at a rung or max_t
    assert len(judged) == len(set(judged)) == 1 + 1 + 4 + 4  # 3, 2 at 1; 4, 5 at 1, 2, 4, 8


# HyperBand, max_t 2, reduction factor 2: its first bracket takes 4 and 3, both run to 2; its
# second takes 5 and 2, each judged at 1, where 2 stops. Each trial takes both CPUs: one
# trial at a time. Stopped while 5 waits paused at 1 for 2, and resumed without the
# brackets, each restored trial would land in a new bracket.
HYPERBAND: dict[str, Any] = {
    **SPEC, "resources": {"cpus_per_trial": 2}, "max_concurrent": None,
    "scheduler": {"type": "hyperband", "max_t": 2, "reduction_factor": 2},
}


def test_a_resumed_hyperband_decides_as_the_uninterrupted_one(tmp_path: Path) -> None:
    whole = hpo.run({**HYPERBAND, "name": "whole"}, storage=str(tmp_path), num_cpus=2)
    assert _ends(whole.dataframe) == {4.0: 2, 3.0: 2, 5.0: 2, 2.0: 1}
    resumed = _stopped_and_resumed(HYPERBAND, tmp_path, "stopped", 2, 1)
    assert _ends(resumed.dataframe) == _ends(whole.dataframe)


def test_what_is_not_carried_is_said() -> None:
    from ray.tune.schedulers import FIFOScheduler, HyperBandScheduler, MedianStoppingRule

    from hpo.driver.schedulers.fifo_choice import FifoScheduler
    from hpo.driver.schedulers.seedable import SeedableASHA, SeedablePBT
    from hpo.ray_adapters.schedulers.state import not_carried

    class Own(FIFOScheduler):  # a user's own: its state is its own
        def on_trial_result(self, *args: Any, **kwargs: Any) -> str:
            return FIFOScheduler.CONTINUE

    carried = (SeedableASHA(), FifoScheduler(), HyperBandScheduler(), MedianStoppingRule(),
               SeedablePBT(hyperparam_mutations={"x": [1, 2]}))
    assert [not_carried(scheduler) for scheduler in carried] == [None] * len(carried)
    line = not_carried(Own())
    assert line is not None and "Own" in line and "\n" not in line


# PBT on two trials (x = 1, 3), one at a time, every 2 iterations, the lower half cloning the
# upper: x = 1 waits paused at 2 for x = 3, then clones it at 4 with x perturbed, seeded.
# Stopped while x = 1 runs again, and resumed without PBT's state, neither trial would have a
# score to compare: no clone.
PBT: dict[str, Any] = {
    **HYPERBAND, "search_space": {"x": {"grid": [1, 3]}}, "constants": {"steps": 6, "sleep": 0.0},
    "search": {"type": "grid", "seed": 2},
    "scheduler": {"type": "pbt", "perturbation_interval": 2, "quantile_fraction": 0.5,
                  "hyperparam_mutations": {"x": {"uniform": [0.5, 4.0]}}},
    "checkpoint": {"frequency": 1, "keep": 4},
}


def _pbt_ends(frame: Any) -> list[tuple[float, int, float]]:
    return sorted((round(float(x), 6), int(n), round(float(score), 6)) for x, n, score
                  in zip(frame["config/x"], frame["iterations"], frame["score"], strict=True))


def test_a_resumed_pbt_decides_as_the_uninterrupted_one(tmp_path: Path) -> None:
    whole = hpo.run({**PBT, "name": "whole"}, storage=str(tmp_path), num_cpus=2)
    resumed = _stopped_and_resumed(PBT, tmp_path, "stopped", 0, 3, once=False)
    assert _pbt_ends(resumed.dataframe) == _pbt_ends(whole.dataframe)
    assert {1.0, 3.0} != {x for x, _, _ in _pbt_ends(whole.dataframe)}  # a clone, perturbed


def test_a_resumed_rasda_keeps_its_growth_records() -> None:
    """Driven as Tune drives it: a trial grown at rung 1 on a roomy cluster is resumed where
    the cluster has no room at its re-add; it keeps its ranks and its rung, and the state
    carries no driver handle (the guard, the gate): the resumed scheduler's own stand."""
    import pickle

    from ray.tune.experiment import Trial
    from test_rasda import _Controller, _result, _scheduler, _trial

    from hpo.driver.plugins.rasda import ranks_of
    from hpo.ray_adapters.schedulers.state import SchedulerState
    from hpo.ray_adapters.tune_rasda import rungs_passed

    before, trials = _scheduler(), [_trial("grown"), _trial("other")]
    controller = _Controller(trials, cpus=8)
    for trial in trials:
        before.on_trial_add(controller, trial)
    before.on_trial_result(controller, trials[0], _result(1, 0.5))  # rung 1: grows
    trials[0].set_status(Trial.PAUSED)
    before.choose_trial_to_run(controller)
    trials[0].set_status(Trial.RUNNING)
    assert ranks_of(trials[0]) == 2
    saving = SchedulerState(before)
    saving.on_step_begin(0, trials)
    state = pickle.loads(pickle.dumps(saving.get_state()))  # as Tune writes it

    after, again = _scheduler(), [_trial("grown"), _trial("other")]  # Tune rebuilds 1 rank
    again[0].set_status(Trial.PENDING)
    again[0].run_metadata.last_result = {"training_iteration": 1, "loss": 0.5}
    crowded = _Controller(again, cpus=2)  # the other trial holds one: no room at the re-add
    restoring = SchedulerState(after)
    restoring.set_state(state)
    for trial in again:
        after.on_trial_add(crowded, trial)
    assert ranks_of(again[0]) == 1
    restoring.on_step_begin(0, again)
    assert ranks_of(again[0]) == 2 and rungs_passed(after, "grown") == 1
    assert after._guard is None and after.gate is not before.gate


def test_a_resumed_median_rule_keeps_each_trials_results() -> None:
    """Its results are keyed by Trial objects and its defaultdicts' factories are lambdas:
    carried by ID onto the resumed run's trials, into the dicts the rule was built with."""
    import pickle

    from ray.tune.experiment import Trial

    from hpo.driver.schedulers.fifo_choice import MedianStopping
    from hpo.ray_adapters.schedulers.state import SchedulerState

    def study() -> tuple[Any, list[Any], Any]:
        rule, trials = MedianStopping(metric="loss", mode="min"), []
        for name in ("a", "b"):
            trials.append(Trial("t", trial_id=name, stub=True))
            trials[-1].set_status(Trial.RUNNING)
        view = type("View", (), {"get_trials": lambda self: trials})()
        for trial in trials:
            rule.on_trial_add(view, trial)
        return rule, trials, view

    rule, trials, view = study()
    for loss, trial in enumerate(trials):
        rule.on_trial_result(view, trial, {"training_iteration": 1, "loss": float(loss),
                                           "time_total_s": 1.0})
    saving = SchedulerState(rule)
    saving.on_step_begin(0, trials)
    state = pickle.loads(pickle.dumps(saving.get_state()))
    resumed, again, view = study()
    restoring = SchedulerState(resumed)
    restoring.set_state(state)
    restoring.on_step_begin(0, again)
    assert {t.trial_id: len(r) for t, r in resumed._results.items()} == {"a": 1, "b": 1}
    assert all(any(t is a for a in again) for t in resumed._results)
    assert resumed._last_pause["new"] == float("-inf")  # its factory kept
