"""Every reported metric in the results, from an experiment folder written here as Tune writes
one (a snapshot, hpo-spec.yaml, result.json files; no Ray, no driver): the trials table, the
curves, `hpo.load`; and log-distributed hyperparameters in the report's analysis."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import hpo
from hpo.cli import app
from hpo.reporting import analysis, figures
from hpo.reporting.data import Experiment
from hpo.results import BOOKKEEPING, metrics

runner = CliRunner()
RAY_FIELDS = {"time_this_iter_s": 0.1, "pid": 7, "hostname": "vm", "node_ip": "127.0.0.1",
              "date": "2026-01-01_00-00-00", "timestamp": 1, "done": False,
              "time_since_restore": 0.1, "iterations_since_restore": 1,
              "checkpoint_dir_name": None, "should_checkpoint": False}


def _write_trial(exp: Path, trial_id: str, status: str, x: float,
                 reports: list[dict[str, object]]) -> dict[str, object]:
    folder = exp / f"trial_{trial_id}"
    folder.mkdir()
    lines = [json.dumps({**r, **RAY_FIELDS, "trial_id": trial_id, "training_iteration": i,
                         "time_total_s": 0.1 * i, "config": {"x": x}})
             for i, r in enumerate(reports, 1)]
    # The last line cut short: Tune is writing it (the driver may have died meanwhile).
    (folder / "result.json").write_text("\n".join(lines) + '\n{"acc": 0.')
    return {"trial_id": trial_id, "status": status, "config": {"x": x},
            "relative_logdir": folder.name}


@pytest.fixture()
def experiment(tmp_path: Path) -> Path:
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "hpo-spec.yaml").write_text(yaml.safe_dump(
        {"name": "exp", "trainable": "a:b", "metric": "acc", "mode": "max",
         "search_space": {"x": {"uniform": [0.0, 1.0]}}}))
    trials = [
        _write_trial(exp, "t1", "TERMINATED", 0.1, [
            {"acc": 0.5, "world": 2, "loss": {"train": 0.9, "val": 1.0}},
            {"acc": 0.7, "loss": {"train": 0.5, "val": 0.6}}]),  # no `world` this time
        _write_trial(exp, "t2", "RUNNING", 0.9, [{"acc": 0.9, "world": 4}]),
        _write_trial(exp, "t3", "PENDING", 0.5, []),
    ]
    state = {"trial_data": [[json.dumps(t), "{}"] for t in trials]}
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps(state))
    return exp


def test_metrics_drops_rays_bookkeeping_and_flattens() -> None:
    result = {**RAY_FIELDS, "trial_id": "t", "training_iteration": 3, "time_total_s": 1.0,
              "config": {"lr": 0.1}, "acc": 0.5, "loss": {"val": 0.2}}
    assert metrics(result) == {"acc": 0.5, "loss/val": 0.2}
    assert set(RAY_FIELDS) <= BOOKKEEPING


def test_trials_table_has_each_metrics_last_value(experiment: Path) -> None:
    trials = hpo.load(experiment).trials
    assert list(trials["trial_id"]) == ["t2", "t1", "t3"]  # best first, none last
    by_id = trials.set_index("trial_id")
    assert by_id.loc["t1", "acc"] == 0.7 and by_id.loc["t1", "best_acc"] == 0.7
    assert by_id.loc["t1", "world"] == 2  # its last value, though the last report lacked it
    assert by_id.loc["t1", "loss/val"] == 0.6 and by_id.loc["t2", "world"] == 4
    assert math.isnan(by_id.loc["t3", "acc"])
    assert not set(trials.columns) & (BOOKKEEPING - {"time_total_s", "hostname", "trial_id"})


def test_curves_have_one_row_per_report(experiment: Path) -> None:
    results = hpo.load(experiment)
    curves = results.curves
    assert list(zip(curves["trial_id"], curves["training_iteration"], strict=True)) == [
        ("t2", 1), ("t1", 1), ("t1", 2)]
    assert list(curves.columns) == ["trial_id", "training_iteration", "time_total_s", "acc",
                                    "world", "loss/train", "loss/val"]
    assert curves["loss/train"].tolist()[1:] == [0.9, 0.5]
    assert results.best_config == {"x": 0.9}
    assert results.path == experiment.resolve()


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet", "table"])
def test_curves_in_every_format(experiment: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"c.{fmt}"
    args = ["results", str(experiment), "--curves", "--format", fmt]
    done = runner.invoke(app, args + ([] if fmt == "table" else ["-o", str(out)]))
    assert done.exit_code == 0, done.output
    if fmt == "table":
        assert "training_iteration" in done.stdout and "loss/val" in done.stdout
        assert len(done.stdout.strip().splitlines()) == 4  # header and three reports
        return
    frame = {"csv": pd.read_csv, "json": pd.read_json, "parquet": pd.read_parquet}[fmt](out)
    assert frame["acc"].tolist() == pytest.approx([0.9, 0.5, 0.7])
    assert frame["training_iteration"].tolist() == [1, 1, 2]


def test_results_of_a_folder_without_reports(experiment: Path) -> None:
    for result in experiment.glob("*/result.json"):
        result.unlink()
    results = hpo.load(experiment)
    assert len(results.trials) == 3 and results.curves.empty
    assert "training_iteration" in results.curves.columns
    with pytest.raises(hpo.ExperimentError, match="no trial reported the metric yet"):
        _ = results.best_config


@pytest.mark.parametrize(("value", "said"), [("0.17", "a str ('0.17')"), (True, "a bool (True)")])
def test_best_of_a_metric_never_reported_as_a_number_says_so(experiment: Path, value: object,
                                                            said: str) -> None:
    """A class trainable's or tune.report's metric, which hpo.report does not check: `hpo best`
    said "no trial reported the metric yet", which the trials did (the table ranks neither)."""
    from calls import cli_invoke

    for result in experiment.glob("*/result.json"):
        result.write_text(json.dumps({**RAY_FIELDS, "acc": value, "training_iteration": 1}))
    code, out, err = cli_invoke(["best", str(experiment)])
    assert (code, out) == (2, ""), err
    assert err.strip() == (f"error: the metric 'acc' was reported as {said}, not a number. "
                           "Hint: report a number, e.g. hpo.report({'acc': float(...)})"), err


def _log_experiment(trials: int = 120) -> Experiment:
    """lr loguniform over four decades, its effect linear in log(lr); noise a smaller one."""
    rng = np.random.default_rng(0)
    lr = 10 ** rng.uniform(-5, -1, trials)
    noise = rng.uniform(0, 1, trials)
    score = np.log10(lr) + 3 * noise
    table = pd.DataFrame({"trial_id": [f"t{i}" for i in range(trials)], "status": "TERMINATED",
                          "best_score": score, "config/lr": lr, "config/noise": noise})
    spec = {"name": "log", "metric": "score", "mode": "max",
            "search_space": {"lr": {"loguniform": [1e-5, 1e-1]},
                             "noise": {"uniform": [0.0, 1.0]}}}
    return Experiment(Path("/nowhere"), spec, table, pd.DataFrame(), pd.DataFrame())


def test_importance_sees_a_loguniform_parameter_in_log_space() -> None:
    scores = analysis.importances(analysis.as_study(_log_experiment()))
    assert isinstance(scores, dict)
    # Var of log10(lr) over its log range: 16/12; of 3*noise: 9/12. On the raw axis most of
    # lr's range is 1e-2..1e-1, one decade, and lr looked the less important one.
    assert scores["lr"] > scores["noise"], scores


def test_parallel_coordinates_put_a_log_parameter_on_a_log_axis() -> None:
    exp = _log_experiment(8)
    study = analysis.as_study(exp)
    (dist,) = {t.distributions["lr"] for t in study.get_trials()}
    assert figures._scaled(dist, 1e-3) == pytest.approx(0.5)  # 1e-3: middle of 1e-5..1e-1
    fig = figures.parallel_coordinates(exp, study)
    assert fig is not None
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert labels == ["lr\n(log)", "noise", "score"] and "0.001" in texts


def test_a_tie_goes_to_the_same_trial_in_the_live_view_and_the_results(tmp_path: Path) -> None:
    """Trials that reach the same best value: `hpo best` (the table's first row) and the live
    view's "best" name one trial, the smaller trial id, whichever reported first and whatever
    order the snapshot lists them in."""
    from types import SimpleNamespace

    from hpo.driver.plugins.progress import LiveProgress

    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "hpo-spec.yaml").write_text(yaml.safe_dump(
        {"name": "exp", "trainable": "a:b", "metric": "loss", "mode": "min",
         "search_space": {"x": {"uniform": [0.0, 1.0]}}}))
    trials = [_write_trial(exp, f"ab_0000{i}", "TERMINATED", x, [{"loss": 1.0}])
              for i, x in ((2, 0.3), (1, 0.2), (0, 0.1))]
    state = {"trial_data": [[json.dumps(t), "{}"] for t in trials]}
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps(state))
    assert hpo.load(exp).best_config == {"x": 0.1}
    view = LiveProgress([("loss", "min")], total=3)
    early = SimpleNamespace(trial_id="ab_00001", status="RUNNING", config={"x": 0.2})
    view.on_trial_result(1, [early], early, {"loss": math.nan, "training_iteration": 1})
    assert view._best is None  # NaN is never the best (the table puts it last)
    for i, x in ((2, 0.3), (0, 0.1), (1, 0.2)):  # the order results arrive in
        trial = SimpleNamespace(trial_id=f"ab_0000{i}", status="TERMINATED", config={"x": x})
        view.on_trial_result(1, [trial], trial, {"loss": 1.0, "training_iteration": 1})
    assert view._best == (1.0, "ab_00000", {"x": 0.1})
