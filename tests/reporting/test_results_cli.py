"""`hpo results` / `hpo best` on a real experiment folder, and on folders that are not one."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import hpo
import hpo.results
from hpo.cli import app
from hpo.cli._shared import export
from hpo.results import load_results, loading, metrics
from hpo.results.files import snapshot

runner = CliRunner()


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    storage = tmp_path_factory.mktemp("results")
    hpo.run({"name": "small", "trainable": "tests/support/study_trainables.py:steady",
             "metric": "score", "mode": "min",
             "search_space": {"x": {"grid": [0.3, 0.1, 0.2]}},
             "constants": {"steps": 2, "sleep": 0.0}, "storage": str(storage)})
    return storage / "small"


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_formats_hold_one_row_per_trial_best_first(experiment: Path, tmp_path: Path,
                                                   fmt: str) -> None:
    out = tmp_path / f"r.{fmt}"
    done = runner.invoke(app, ["results", str(experiment), "--format", fmt, "-o", str(out)])
    assert done.exit_code == 0, done.output
    frame = {"csv": pd.read_csv, "json": pd.read_json, "parquet": pd.read_parquet}[fmt](out)
    assert frame["config/x"].tolist() == pytest.approx([0.1, 0.2, 0.3])  # mode: min, best first
    assert frame["best_score"].tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert set(frame.columns) >= {"trial_id", "status", "last_score", "iterations",
                                  "time_total_s"}


@pytest.mark.slow
def test_table_and_json_to_stdout(experiment: Path) -> None:
    table = runner.invoke(app, ["results", str(experiment)])
    assert table.exit_code == 0 and "best_score" in table.stdout
    records = json.loads(runner.invoke(app, ["results", str(experiment), "--format",
                                             "json"]).stdout)
    assert len(records) == 3


@pytest.mark.slow
def test_best_prints_the_winning_config_as_yaml(experiment: Path) -> None:
    done = runner.invoke(app, ["best", str(experiment)])
    assert done.exit_code == 0
    assert yaml.safe_load(done.stdout) == {"steps": 2, "sleep": 0.0, "x": 0.1}


@pytest.mark.parametrize(("args", "expected"), [
    (["results", "/nonexistent/exp"], "no such folder"),
    (["results", "{empty}"], "no hpo-spec.yaml here"),
    (["best", "{empty}"], "no hpo-spec.yaml here"),
    (["resume", "{empty}"], "no hpo-spec.yaml here"),
    (["results", "{spec_only}"], "not an experiment folder"),
    (["results", "{spec_only}", "--format", "xml"], "unknown format 'xml'"),
])
def test_not_an_experiment(tmp_path: Path, args: list[str], expected: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "spec_only").mkdir()
    (tmp_path / "spec_only" / "hpo-spec.yaml").write_text(
        "name: x\ntrainable: a:b\nmetric: m\nmode: max\n")
    args = [a.format(empty=tmp_path / "empty", spec_only=tmp_path / "spec_only") for a in args]
    done = runner.invoke(app, args)
    assert done.exit_code == 2
    assert expected in done.stderr and "Hint:" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_parquet_needs_a_file(experiment: Path) -> None:
    done = runner.invoke(app, ["results", str(experiment), "--format", "parquet"])
    assert done.exit_code == 2 and "needs -o FILE" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("name", "options", "kind"), [
    ("r.csv", [], "csv"), ("r.JSON", [], "json"), ("auto.parquet", [], "parquet"),
    ("r.txt", [], "table"), ("r", [], "table"),
    ("r.json", ["--format", "csv"], "csv"),  # an explicit --format wins over the extension
])
def test_without_format_the_output_files_extension_chooses(experiment: Path, tmp_path: Path,
                                                           name: str, options: list[str],
                                                           kind: str) -> None:
    out = tmp_path / name
    done = runner.invoke(app, ["results", str(experiment), "-o", str(out), *options])
    assert done.exit_code == 0, done.output
    read = {"csv": pd.read_csv, "parquet": pd.read_parquet,
            "json": lambda path: pd.DataFrame(json.loads(path.read_text())),
            "table": lambda path: pd.read_csv(path, sep=r"\s+")}[kind]
    frame = read(out)
    assert len(frame) == 3 and list(frame.columns[:2]) == ["trial_id", "status"], frame


def test_json_keeps_every_float_exactly(tmp_path: Path) -> None:
    """Exactly, not only to 15 significant digits: pandas' to_json kept 10 decimals (1.234e-12
    became 0.0) and keeps at most 15 (0.07780155576901421 lost its 16th digit)."""
    values = [1.234e-12, 0.07780155576901421, 1.2345678901234567e-10, 1e300, 0.1 + 0.2]
    frame = pd.DataFrame({"x": values + [float("nan")], "n": range(6)})
    export(frame, "json", tmp_path / "r.json")
    records = json.loads((tmp_path / "r.json").read_text())
    assert [r["x"] for r in records] == [*values, None]  # ==: every bit; NaN: null
    assert [r["n"] for r in records] == list(range(6))


@pytest.mark.slow
def test_json_of_a_real_run_holds_its_floats_exactly(experiment: Path) -> None:
    done = runner.invoke(app, ["results", str(experiment), "--format", "json"])
    records, frame = json.loads(done.stdout), load_results(experiment)
    assert [r["time_total_s"] for r in records] == frame["time_total_s"].tolist()
    assert [r["cpu_hours"] for r in records] == frame["cpu_hours"].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "json", "parquet", "table"])
def test_output_into_a_missing_folder_makes_it(experiment: Path, tmp_path: Path,
                                               fmt: str) -> None:
    out = tmp_path / "new" / "deeper" / f"r.{fmt}"
    done = runner.invoke(app, ["results", str(experiment), "--format", fmt, "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert out.stat().st_size > 0


@pytest.mark.slow
@pytest.mark.parametrize(("target", "expected"), [
    ("a_file/r.csv", "cannot make its folder"),  # a file where its folder would be
    ("a_folder", "is a folder"),
])
def test_output_that_cannot_be_written_is_one_line(experiment: Path, tmp_path: Path,
                                                   target: str, expected: str) -> None:
    (tmp_path / "a_file").write_text("")
    (tmp_path / "a_folder").mkdir()
    out = tmp_path / target
    done = runner.invoke(app, ["results", str(experiment), "--format", "csv", "-o", str(out)])
    assert done.exit_code == 2, done.output  # not 1 with a traceback
    line = done.stderr.strip()
    assert "\n" not in line and f"-o {out}: {expected}" in line and "Hint:" in line, line


@pytest.mark.slow
def test_results_wait_for_a_snapshot_being_written(experiment: Path, tmp_path: Path) -> None:
    """While a run goes, Tune copies its snapshot into the folder in place: a reader may find
    it empty for a moment, and must read it again rather than fail."""
    copy = tmp_path / "small"
    shutil.copytree(experiment, copy)
    (state,) = copy.glob("experiment_state-*.json")
    whole = state.read_text()
    state.write_text("")  # the copy has begun
    writer = threading.Timer(0.5, state.write_text, args=(whole,))
    writer.start()
    try:
        frame = load_results(copy)
    finally:
        writer.join()
    assert len(frame) == 3


def test_a_damaged_snapshot_is_an_error_that_names_it(tmp_path: Path) -> None:
    state = tmp_path / "experiment_state-2026-01-01_00-00-00.json"
    state.write_text('{"trial_data": [')
    with pytest.raises(hpo.ExperimentError, match="not valid JSON for 0.2 s"):
        snapshot(tmp_path, timeout_s=0.2)


@pytest.mark.slow
def test_every_reported_metric_and_the_curves_of_a_real_run(experiment: Path) -> None:
    """`steady` reports `score` and `resumed_at`: both come back, per trial and per report."""
    results = hpo.load(experiment)
    assert {"score", "resumed_at"} <= set(results.trials.columns)
    assert "pid" not in results.trials.columns and "node_ip" not in results.trials.columns
    assert results.trials["score"].tolist() == pytest.approx([0.2, 0.4, 0.6])  # x * 2 steps
    assert len(results.curves) == 6 and results.best_config["x"] == 0.1
    csv = runner.invoke(app, ["results", str(experiment), "--curves", "--format", "csv"])
    assert csv.exit_code == 0, csv.output
    assert csv.stdout.splitlines()[0] == ("trial_id,training_iteration,time_total_s,cpu_hours,"
                                          "gpu_hours,score,resumed_at")


def test_a_results_metrics_are_its_own_keys_flattened_without_rays() -> None:
    """A key of Ray's drops with all it holds, also where a flat key names it first."""
    row = {"score": 1.0, "nested": {"a": 1, "b": {"c": 2}}, "train/loss": 0.5,
           "config": {"x": 1, "deep": {"y": 2}}, "config/z": 3, "done": False,
           "time_this_iter_s": 0.1, "hostname": {"odd": "nested"}}
    assert metrics(row) == {"score": 1.0, "nested/a": 1, "nested/b/c": 2, "train/loss": 0.5}


@pytest.mark.slow
def test_results_read_in_a_thread_are_the_same_frame(experiment: Path) -> None:
    """A run's end reads its results in a thread while Ray stops (hpo.results.loading)."""
    assert loading(experiment).result().equals(load_results(experiment))


def test_results_read_in_a_thread_raise_their_error_where_asked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = hpo.results.load_results

    def recorded(exp_dir: Path) -> pd.DataFrame:
        threads.append(threading.current_thread().name)
        return real(exp_dir)

    monkeypatch.setattr(hpo.results, "load_results", recorded)
    future = loading(tmp_path / "gone")
    with pytest.raises(hpo.ExperimentError, match="no such folder"):
        future.result()
    assert threads and threads[0].startswith("hpo-results")
