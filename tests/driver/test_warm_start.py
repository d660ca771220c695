"""search.points_to_evaluate runs known configurations first; search.warm_start feeds an
earlier experiment's finished trials to Optuna before the first new trial. Real small runs."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml
from calls import SUPPORT, hpo_cli

import hpo
from hpo.results import load_results

STEADY = f"{SUPPORT / 'study_trainables.py'}:steady"


def _spec(tmp_path: Path, name: str, search: dict[str, Any], high: float,
          num_samples: int) -> dict[str, Any]:
    return {"name": name, "trainable": STEADY, "metric": "score", "mode": "max",
            "num_samples": num_samples, "search_space": {"x": {"uniform": [0.0, high]}},
            "constants": {"steps": 2, "sleep": 0}, "search": search,
            "storage": str(tmp_path / "results")}


@pytest.mark.ray
@pytest.mark.slow
def test_points_first_then_warm_start_from_that_experiment(tmp_path: Path) -> None:
    first = _spec(tmp_path, "first", {"type": "random", "seed": 0,
                                      "points_to_evaluate": [{"x": 2.5}, {"x": 0.5}]}, 3.0, 2)
    frame = hpo.run(first, num_cpus=2).dataframe
    assert sorted(frame["config/x"]) == [0.5, 2.5]  # the points, not random draws

    # 2.5 lies outside the new space: skipped by name; 0.5 reaches Optuna's study
    second = _spec(tmp_path, "second", {"type": "optuna", "seed": 0, "warm_start":
                                        str(tmp_path / "results" / "first"),
                                        "points_to_evaluate": [{"x": 1.5}]}, 2.0, 1)
    path = tmp_path / "second.yaml"
    path.write_text(yaml.safe_dump(second))
    done = hpo_cli("run", str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert f"warm start: 1 trials from {tmp_path / 'results' / 'first'}" in lines
    skipped = [line for line in lines if "skipped trial" in line]
    assert len(skipped) == 1 and "x: 2.5 is outside uniform [0, 2]" in skipped[0]

    exp_dir = tmp_path / "results" / "second"
    assert list(load_results(exp_dir)["config/x"]) == [1.5]  # the point ran first
    state = pickle.loads(next(exp_dir.glob("searcher-state-*.pkl")).read_bytes())
    study = state["_ot_study"]
    told = sorted((t.params["x"], t.value) for t in study.trials)
    assert told == [(0.5, 1.0), (1.5, 3.0)]  # the earlier trial with its final score
