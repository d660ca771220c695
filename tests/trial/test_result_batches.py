"""A fast-reporting trial's results reach Tune in batches (hpo.trial.batched), and nothing else
moves: every row reaches result.json once, in order; a batch ends at every decision point of
the scheduler; a STOP inside a batch drops the rows after it. Histories are compared as
lists, never as sets."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from calls import trial_rows
from ray.tune import Callback
from ray.tune.execution.tune_controller import TuneController

import hpo
from hpo.driver.run.translate import result_batch_ends
from hpo.driver.schedulers.from_spec import build
from hpo.spec.model import Spec
from hpo.spec.schedulers import Asha
from hpo.trial.batched import BATCH_S, BatchedResults, ends_batch

REPORTS = 300


def fast(config: dict[str, Any]) -> None:
    """Reports without a pause: score = x * iteration."""
    for step in range(1, int(config["reports"]) + 1):
        hpo.report({"score": config["x"] * step})


def saves(config: dict[str, Any]) -> None:
    """Reports without a pause, with a checkpoint every report (kept every `frequency`)."""
    for step in range(1, int(config["reports"]) + 1):
        hpo.report({"score": config["x"] * step}, checkpoint={"step": step})


def paced(config: dict[str, Any]) -> None:
    """Reports every `sleep` s (more than BATCH_S: each row ends its batch by time); touches
    `<marks>/<x>-<step>-reporting` before each report and `<marks>/<x>-<step>` once it
    returned."""
    marks = Path(config["marks"])
    for step in range(1, int(config["reports"]) + 1):
        time.sleep(config["sleep"])
        (marks / f"{config['x']}-{step}-reporting").touch()
        hpo.report({"score": config["x"] * step})
        (marks / f"{config['x']}-{step}").touch()


class HoldsRow(Callback):
    """Holds the driver on each trial's first row until `<marks>/<x>-<mark>` appears (at most
    `wait_s`); notes whether it did."""

    def __init__(self, marks: Path, mark: str, wait_s: float) -> None:
        self.marks, self.mark, self.wait_s = marks, mark, wait_s
        self.appeared: list[bool] = []

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        if result["training_iteration"] == 1:
            mark = self.marks / f"{trial.config['x']}-{self.mark}"
            deadline = time.monotonic() + self.wait_s
            while not mark.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            self.appeared.append(mark.exists())


def fails(config: dict[str, Any]) -> None:
    """Reports without a pause, then raises."""
    fast(config)
    raise ValueError(f"boom after {config['reports']}")


def _spec(**extra: Any) -> dict[str, Any]:
    return {"name": "b", "trainable": "x:y", "metric": "score", "mode": "max",
            "num_samples": 1, "max_concurrent": 2, "resources": {"cpus_per_trial": 1},
            "search_space": {"x": {"choice": [1.0, 2.0]}}, "search": {"type": "grid"},
            "constants": {"reports": REPORTS}, **extra}


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, list[int]]]]:
    """(trial id, the iterations of the rows) of every batch Tune's controller processes (not
    the closing duplicate a function trial's actor sends when the function returns)."""
    seen: list[tuple[str, list[int]]] = []
    original = TuneController._on_training_result

    def spy(self: Any, trial: Any, result: Any) -> None:
        rows = result if isinstance(result, list) else [result]
        seen.append((trial.trial_id, [row.get("training_iteration") for row in rows
                                      if "__duplicate__" not in row]))
        original(self, trial, result)

    monkeypatch.setattr(TuneController, "_on_training_result", spy)
    yield seen


def _iterations(exp_dir: Path) -> list[list[int]]:
    return [[row["training_iteration"] for row in rows]
            for rows in trial_rows(exp_dir).values()]


@pytest.mark.parametrize("asha", [
    {"grace_period": 1, "reduction_factor": 4, "max_t": 100, "brackets": 1},
    {"grace_period": 2, "reduction_factor": 3.5, "max_t": 50, "brackets": 3},
    {"grace_period": 1, "reduction_factor": 2, "max_t": 16, "brackets": 2},
])
def test_ashas_decision_points_are_rays_rungs_and_max_t(asha: dict[str, Any]) -> None:
    spec = Asha(type="asha", **asha)
    built = build(spec)
    rungs = {math.ceil(milestone) for bracket in built._brackets
             for milestone, _ in bracket._rungs}
    assert spec.decision_points() == sorted(rungs | {asha["max_t"]})


def test_only_schedulers_that_never_pause_batch() -> None:
    assert result_batch_ends(Spec.model_validate(_spec())) == []
    assert result_batch_ends(Spec.model_validate(
        _spec(stop={"training_iteration": 7.5}))) == [8]
    for kind in ("hyperband", "median", "pbt"):
        extra = {"hyperparam_mutations": {"lr": {"uniform": [0.1, 1.0]}}} if kind == "pbt" else {}
        spec = Spec.model_validate(_spec(scheduler={"type": kind, **extra}))
        assert result_batch_ends(spec) is None, kind
    timed = Spec.model_validate(_spec(scheduler={"type": "asha", "time_attr": "time_total_s"}))
    assert result_batch_ends(timed) is None


class _Rows(BatchedResults):
    """Tune's train(), one row after another (the mixin's only need from its Trainable)."""

    def __init__(self, rows: list[dict[str, Any]], ends: frozenset[int]) -> None:
        self._rows, self.batch_ends = iter(rows), ends

    def train(self) -> dict[str, Any]:
        row = next(self._rows)
        if isinstance(row, Exception):
            raise row
        return row


def test_a_batch_ends_at_a_decision_point_a_checkpoint_and_the_end() -> None:
    rows = [{"training_iteration": i} for i in range(1, 10)]
    rows[5]["should_checkpoint"] = True  # iteration 6
    rows[8]["done"] = True
    trial = _Rows(rows, frozenset({3}))
    got = [[row["training_iteration"] for row in trial.train_buffered(1000, 0.1)]
           for _ in range(3)]
    assert got == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert ends_batch({"__duplicate__": True}, frozenset())
    assert not ends_batch({"training_iteration": 4, "done": False}, frozenset({3}))


def test_a_trials_error_reaches_tune_after_the_rows_it_reported_first() -> None:
    error = ValueError("the trial's own")
    trial = _Rows([{"training_iteration": 1}, {"training_iteration": 2}, error,
                   {"training_iteration": 3}], frozenset())
    assert [row["training_iteration"] for row in trial.train_buffered()] == [1, 2]
    with pytest.raises(ValueError) as raised:
        trial.train_buffered()
    assert raised.value is error
    # raised without asking the trial for another row
    assert [row["training_iteration"] for row in trial.train_buffered()] == [3]


@pytest.mark.slow
def test_fifo_rows_arrive_in_batches_each_once_in_order(
        tmp_path: Path, batches: list[tuple[str, list[int]]]) -> None:
    hpo.run(_spec(), trainable=fast, storage=str(tmp_path), keep_ray=True)
    assert _iterations(tmp_path / "b") == [list(range(1, REPORTS + 1))] * 2
    assert sum(len(rows) for _, rows in batches) == 2 * REPORTS
    assert max(len(rows) for _, rows in batches) > 1  # else Tune called train() per row


@pytest.mark.slow
def test_asha_sees_every_rung_at_a_batchs_end_and_stops_exactly_there(
        tmp_path: Path, batches: list[tuple[str, list[int]]]) -> None:
    asha = {"type": "asha", "grace_period": 5, "reduction_factor": 2, "max_t": 80}
    # one at a time, each worse than the last: the second and later stop at the first rung
    spec = _spec(scheduler=asha, max_concurrent=1, constants={"reports": 80},
                 search_space={"x": {"choice": [4.0, 3.0, 2.0, 1.0]}})
    hpo.run(spec, trainable=fast, storage=str(tmp_path), keep_ray=True)
    points = Asha(**asha).decision_points()
    for _, rows in batches:  # a rung inside a batch: the trial ran past a decision
        assert not set(rows[:-1]) & set(points), rows
    histories = _iterations(tmp_path / "b")
    assert sorted(histories) == [list(range(1, 6))] * 3 + [list(range(1, 81))]


@pytest.mark.slow
def test_a_stop_inside_a_batch_drops_the_rows_after_it(tmp_path: Path) -> None:
    """`stop: {score: ...}` is no decision point the trial knows: Tune stops at the first row
    that meets it and the rows the trial reported after it in that batch never reach disk."""
    spec = _spec(stop={"score": 150})
    hpo.run(spec, trainable=fast, storage=str(tmp_path), keep_ray=True)
    assert sorted(_iterations(tmp_path / "b")) == [list(range(1, 76)), list(range(1, 151))]


@pytest.mark.slow
def test_a_report_that_ends_a_batch_by_time_returns_before_the_driver_has_taken_it(
        tmp_path: Path) -> None:
    """The trial trains on while the driver takes a batch that no decision waits on: while
    the driver holds its first row it reports the second (without it, never), and that row's
    time_this_iter_s is its own step's (Tune's count would start when it asked for it)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    held = HoldsRow(marks, "2-reporting", wait_s=30)
    sleep = 1.5 * BATCH_S
    spec = _spec(constants={"reports": 4, "marks": str(marks), "sleep": sleep})
    hpo.run(spec, trainable=paced, storage=str(tmp_path), keep_ray=True, callbacks=[held])
    assert held.appeared == [True, True]
    assert _iterations(tmp_path / "b") == [[1, 2, 3, 4]] * 2
    times = [row["time_this_iter_s"] for rows in trial_rows(tmp_path / "b").values()
             for row in rows]
    assert min(times) >= 0.9 * sleep, times


@pytest.mark.slow
def test_a_stop_on_a_metric_holds_each_report_until_the_driver_has_it(tmp_path: Path) -> None:
    """A `stop` on a metric may land on any row: the trial waits at each report, so one
    stopped mid-run hands its actor on at once (one stopped while training on would still be
    in its 2.5 s step when Tune's 2 s reset gave up, and the next trial would fail), and its
    history ends at the stop."""
    marks = tmp_path / "marks"
    marks.mkdir()
    held = HoldsRow(marks, "1", wait_s=3)
    spec = _spec(stop={"score": 2}, max_concurrent=1,
                 constants={"reports": 4, "marks": str(marks), "sleep": 2.5})
    result = hpo.run(spec, trainable=paced, storage=str(tmp_path), keep_ray=True,
                     callbacks=[held])
    assert held.appeared == [False, False]
    assert sorted(_iterations(tmp_path / "b")) == [[1], [1, 2]]
    assert result.errors == 0
    pids = {row["pid"] for rows in trial_rows(tmp_path / "b").values() for row in rows}
    assert len(pids) == 1  # the second trial reused the first one's actor


@pytest.mark.slow
def test_a_batch_that_ends_in_a_save_sends_no_train_call_before_the_save_resolves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        batches: list[tuple[str, list[int]]]) -> None:
    """Tune acted on the CONTINUE of a batch's earlier rows while the save its last row
    started was in flight: a train call behind the save, another after it, and from then on
    two in flight, the last past the trial's end (hpo.ray_adapters.tune_fit)."""
    trains_during_saves = []
    original = TuneController._schedule_trial_train

    def spy(self: Any, trial: Any) -> None:
        trains_during_saves.append(trial.is_saving)
        original(self, trial)

    monkeypatch.setattr(TuneController, "_schedule_trial_train", spy)
    spec = _spec(checkpoint={"frequency": 25, "keep": 1}, constants={"reports": 100})
    result = hpo.run(spec, trainable=saves, storage=str(tmp_path), keep_ray=True)
    assert any(len(rows) > 1 and rows[-1] % 25 == 0 for _, rows in batches), batches
    assert trains_during_saves and not any(trains_during_saves)
    assert result.errors == 0
    assert _iterations(tmp_path / "b") == [list(range(1, 101))] * 2
    assert "Should not have reached here" not in (tmp_path / "b" / "hpo.log").read_text()


@pytest.mark.slow
def test_a_trial_that_fails_keeps_every_row_it_reported_and_its_cause(tmp_path: Path) -> None:
    spec = _spec(search_space={"x": {"choice": [1.0]}})
    with pytest.warns(hpo.TrialErrorsWarning, match=f"boom after {REPORTS}"):
        result = hpo.run(spec, trainable=fails, storage=str(tmp_path), keep_ray=True)
    assert _iterations(tmp_path / "b") == [list(range(1, REPORTS + 1))]
    assert f"boom after {REPORTS}" in result.errors_summary()
