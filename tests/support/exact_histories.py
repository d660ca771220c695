"""A trial's history is exact when result.json, progress.csv and hpo.load's curves hold its
steps 1..N once each, in order: lists compared, never sets."""

from __future__ import annotations

import csv
from pathlib import Path

from calls import trial_rows
from stop_points import SPEC

import hpo

STEPS = SPEC["constants"]["steps"]
EXACT = list(range(1, STEPS + 1))


def _csv_iterations(exp_dir: Path) -> dict[str, list[int]]:
    found = {}
    for path in sorted(exp_dir.glob("*/progress.csv")):
        with path.open() as f:
            found[path.parent.name] = [int(row["training_iteration"]) for row in
                                       csv.DictReader(f)]
    return found


def assert_exact(exp_dir: Path, trials: int = SPEC["num_samples"], exact: list[int] = EXACT
                 ) -> None:
    """result.json, progress.csv and hpo.load's curves hold each trial's steps 1..N once."""
    rows = {name: [r["training_iteration"] for r in found]
            for name, found in trial_rows(exp_dir).items()}
    assert len(rows) == trials
    assert all(steps == exact for steps in rows.values()), rows
    assert _csv_iterations(exp_dir) == rows
    curves = hpo.load(exp_dir).curves
    for trial_id, steps in curves.groupby("trial_id")["training_iteration"]:
        assert list(steps) == exact, (trial_id, list(steps))
