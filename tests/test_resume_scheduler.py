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
    "trainable": "tests/study_trainables.py:steady", "metric": "score", "mode": "max",
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
                         iteration: int) -> Any:
    """The study stopped (SIGUSR1) when its trial started `trial`-th reports `iteration`,
    then resumed; each result is handed to the scheduler once across both."""
    fired, seen = tmp_path / f"{name}.fired", tmp_path / f"{name}.seen"
    with pytest.raises(hpo.RunError, match="stopped by SIGUSR1"):
        hpo.run({**spec, "name": name}, storage=str(tmp_path), num_cpus=2,
                callbacks=[StopAt(signal.SIGUSR1, trial, iteration, str(fired)),
                           Reports(str(seen))])
    resumed = hpo.resume(tmp_path / name, num_cpus=2)
    assert fired.read_text().split()[1] == str(iteration)
    lines = seen.read_text().splitlines()
    assert len(lines) == len(set(lines))  # no result seen twice: none judged twice
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
    from ray.tune.schedulers import HyperBandScheduler, MedianStoppingRule

    from hpo.ray_adapters.schedulers.state import not_carried
    from hpo.spec.fifo_choice import FifoScheduler
    from hpo.spec.seedable import SeedableASHA

    assert not_carried(SeedableASHA()) is None
    assert not_carried(FifoScheduler()) is None
    for other in (HyperBandScheduler(), MedianStoppingRule()):
        line = not_carried(other)
        assert line is not None and type(other).__name__ in line and "\n" not in line
