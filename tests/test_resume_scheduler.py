"""A resume keeps the scheduler's decisions (hpo.ray_adapters.scheduler_state): ASHA's rung
records ride in Tune's snapshot, so a study stopped and resumed decides as the uninterrupted
one does, where arrivals are ordered by construction (a grid, one trial at a time); the
schedulers whose state is not carried are named in one line."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
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


def _ends(frame: Any) -> dict[float, int]:
    return {float(x): int(n) for x, n in zip(frame["config/x"], frame["iterations"], strict=True)}


def test_a_resumed_asha_decides_as_the_uninterrupted_one(tmp_path: Path) -> None:
    whole = hpo.run({**SPEC, "name": "whole"}, storage=str(tmp_path), num_cpus=2)
    assert _ends(whole.dataframe) == {4.0: 8, 3.0: 1, 5.0: 8, 2.0: 1}
    with pytest.raises(hpo.RunError, match="stopped by SIGUSR1"):
        hpo.run({**SPEC, "name": "stopped"}, storage=str(tmp_path), num_cpus=2,
                callbacks=[StopAt(signal.SIGUSR1, 2, 6, str(tmp_path / "fired"))])
    resumed = hpo.resume(tmp_path / "stopped", num_cpus=2)
    assert (tmp_path / "fired").read_text().split()[1] == "6"
    assert _ends(resumed.dataframe) == _ends(whole.dataframe)


def test_what_is_not_carried_is_said() -> None:
    from ray.tune.schedulers import HyperBandScheduler, MedianStoppingRule

    from hpo.ray_adapters.scheduler_state import not_carried
    from hpo.spec.fifo_choice import FifoScheduler
    from hpo.spec.seedable import SeedableASHA

    assert not_carried(SeedableASHA()) is None
    assert not_carried(FifoScheduler()) is None
    for other in (HyperBandScheduler(), MedianStoppingRule()):
        line = not_carried(other)
        assert line is not None and type(other).__name__ in line and "\n" not in line
