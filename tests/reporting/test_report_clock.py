"""The report's wall-time figures place each report by hpo.report's own clock (`report_time`,
to the microsecond), not by Ray's whole-second `timestamp`: 16 trials reported within three
seconds are 16 points in time, not three."""

from __future__ import annotations

import json
from pathlib import Path

from report_helpers import write_experiment

from hpo.reporting import walltime
from hpo.reporting.data import load_experiment
from hpo.results import load_results


def _with_clock(exp: Path, clock: dict[str, float] | None) -> None:
    """Every report of trial i made at 1.7e9 + 0.17 * i s, Ray's timestamp its whole second."""
    for i, result in enumerate(sorted(exp.glob("*/result.json"))):
        rows = [json.loads(line) for line in result.read_text().splitlines()]
        for row in rows:
            row["timestamp"] = int(1.7e9 + 0.17 * i)
            if clock is not None:
                row["report_time"] = clock[result.parent.name] = 1.7e9 + 0.17 * i
        result.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_reports_are_placed_by_hpos_clock(tmp_path: Path) -> None:
    clock: dict[str, float] = {}
    exp_dir = write_experiment(tmp_path, trials=16, iterations=1, hosts=1)
    _with_clock(exp_dir, clock)
    exp = load_experiment(exp_dir)
    assert exp.curves["timestamp"].nunique() == 16
    assert sorted(exp.curves["timestamp"]) == sorted(clock.values())
    assert "report_time" not in exp.reported_metrics  # a clock, not a metric
    assert "report_time" not in load_results(exp_dir).columns
    spans = walltime.trial_spans(exp)
    assert spans["end"].nunique() == 16


def test_without_hpos_clock_rays_seconds_are_used(tmp_path: Path) -> None:
    exp_dir = write_experiment(tmp_path, trials=16, iterations=1, hosts=1)
    _with_clock(exp_dir, None)  # a class trainable's reports: Ray's timestamp only
    assert load_experiment(exp_dir).curves["timestamp"].nunique() == 3
