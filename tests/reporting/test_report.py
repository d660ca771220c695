"""`hpo report` on real ASHA, PBT and HyperBand experiments made here (tiny runs of the
`steady` test trainable), rendered in headless Chromium and used there as a person would (the
metric menu, a sort of the table, a PNG saved), offline; the TensorBoard files and the Optuna
mirror of the same runs; folders a report cannot be made of."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml
from calls import ROOT
from report_helpers import (
    chromium_probe,
    chromium_render,
    tensorboard_scalars,
    without_plotly_js,
)
from typer.testing import CliRunner

import hpo
from hpo.cli import app
from hpo.optuna.storage import open_storage
from hpo.reporting.data import PBT_LOG, load_experiment
from hpo.results import load_results, trial_results

runner = CliRunner()
STEADY = {"trainable": "tests/support/study_trainables.py:steady", "metric": "score", "mode": "max",
          "search_space": {"x": {"uniform": [0.1, 1.0]}}, "search": {"type": "random", "seed": 2}}
ASHA = {**STEADY, "name": "asha", "num_samples": 8, "max_concurrent": 2,
        "constants": {"steps": 6, "sleep": 0.4},
        "scheduler": {"type": "asha", "max_t": 6, "grace_period": 1, "reduction_factor": 2}}
PBT = {**STEADY, "name": "pbt", "num_samples": 4, "constants": {"steps": 8, "sleep": 0.05},
       "scheduler": {"type": "pbt", "perturbation_interval": 2,
                     "hyperparam_mutations": {"x": {"uniform": [0.1, 1.0]}}}}
HYPERBAND = {**STEADY, "name": "hyperband", "num_samples": 6, "constants": {"steps": 9,
             "sleep": 0.0}, "scheduler": {"type": "hyperband", "max_t": 9, "reduction_factor": 3}}
FIGURES = {"asha": {"learning_curves", "rungs", "parallel_coordinates", "importance"},
           "pbt": {"learning_curves", "pbt_lineage", "parallel_coordinates", "importance"},
           "hyperband": {"learning_curves", "rungs", "parallel_coordinates", "importance"}}
# plotly figures, shown instead of a PNG (learning curves) or only interactive
PLOTS = {"learning_curves", "best_over_time", "timeline"}


def _wait_until_reporting(exp_dir: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until the snapshot shows an unfinished trial and some trial has reported."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before a report of it running was made"
        try:
            frame = load_results(exp_dir)
        except hpo.ExperimentError:
            frame = None
        if frame is not None and len(frame) and frame["iterations"].max() >= 1 and \
                frame["status"].isin(["RUNNING", "PENDING"]).any():
            return
        time.sleep(0.2)
    pytest.fail("the experiment made no progress before the timeout")


@pytest.fixture(scope="module")
def asha(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """ASHA through the real CLI with an Optuna journal; a report is made while it runs."""
    root = tmp_path_factory.mktemp("asha")
    journal = root / "optuna-journal.log"
    (root / "asha.yaml").write_text(yaml.safe_dump({**ASHA, "optuna_storage": str(journal)}))
    proc = subprocess.Popen([sys.executable, "-m", "hpo", "run", str(root / "asha.yaml"),
                             "--storage", str(root / "results")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    exp_dir = root / "results" / "asha"
    try:
        _wait_until_reporting(exp_dir, proc)
        live = runner.invoke(app, ["report", str(exp_dir), "-o", str(root / "live.html")])
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, output
    return {"dir": exp_dir, "journal": journal, "live": live, "live_html": root / "live.html"}


def _run(tmp_path_factory: pytest.TempPathFactory, spec: dict[str, Any]) -> Path:
    storage = tmp_path_factory.mktemp(spec["name"])
    hpo.run({**spec, "storage": str(storage)})
    return storage / spec["name"]


@pytest.fixture(scope="module")
def experiments(asha: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
                ) -> dict[str, Path]:
    return {"asha": asha["dir"], "pbt": _run(tmp_path_factory, PBT),
            "hyperband": _run(tmp_path_factory, HYPERBAND)}


@pytest.fixture(scope="module")
def reports(experiments: dict[str, Path]) -> dict[str, Path]:
    """`hpo report` (default output: EXPERIMENT_DIR/report.html) on each experiment."""
    for name, exp_dir in experiments.items():
        done = runner.invoke(app, ["report", str(exp_dir)])
        assert done.exit_code == 0, done.output
        assert f"report: {exp_dir / 'report.html'} ({len(load_results(exp_dir))} trials" in \
            done.stdout, done.stdout
        assert done.stderr == "", f"{name}: a finished run needs no note: {done.stderr}"
    return {name: exp_dir / "report.html" for name, exp_dir in experiments.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["asha", "pbt", "hyperband"])
def test_report_holds_every_trial_and_figure(name: str, experiments: dict[str, Path],
                                             reports: dict[str, Path]) -> None:
    page = reports[name].read_text()
    body = without_plotly_js(page)
    table = load_results(experiments[name])
    for trial_id in table["trial_id"]:
        assert f"<td>{trial_id}</td>" in body
    assert f"Trial <b>{table.iloc[0]['trial_id']}</b>" in body  # best trial first
    assert body.count("<tr") == len(table) + 1  # header + one row per trial
    assert f"<tr class='best'><td>{table.iloc[0]['trial_id']}</td>" in body
    figures = {p.stem for p in (reports[name].parent / "report_figures").glob("*.png")}
    assert figures == FIGURES[name]
    for figure in figures | PLOTS:
        assert f"id='fig-{figure}'" in body
    for plot in PLOTS:
        assert f'id="plot-{plot}" class="plotly-graph-div"' in body
    assert body.count("data:image/png;base64,") == len(figures - PLOTS)
    assert "id='running'" not in page


@pytest.mark.slow
@pytest.mark.parametrize("name", ["asha", "pbt", "hyperband"])
def test_report_is_one_offline_file(name: str, reports: dict[str, Path]) -> None:
    """plotly.js inline once; nothing else names a URL, and the page's policy forbids loads."""
    page = reports[name].read_text()
    body = without_plotly_js(page)
    assert page.count("<script id='plotly-js'>") == 1 and len(page) - len(body) > 3_000_000
    assert "http://" not in body and "https://" not in body, "must work offline"
    assert not re.search(r"<(script|img|link|iframe)[^>]*\s(src|href)=.(?!data:)", body, re.I)
    assert "Content-Security-Policy" in body and "default-src 'none'" in body


@pytest.mark.slow
@pytest.mark.parametrize("name", ["asha", "pbt", "hyperband"])
def test_report_renders_in_chromium(name: str, reports: dict[str, Path],
                                    tmp_path: Path) -> None:
    errors, dom, pixels = chromium_render(reports[name], tmp_path)
    assert errors == [], errors
    assert 'title="click to sort"' in dom, "the table's script did not run"
    # Plots drew: many distinct colours (a text-only or broken-image page has a handful).
    colours = len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0))
    assert pixels.std() > 0.05 and colours > 200, (pixels.std(), colours)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["asha", "pbt", "hyperband"])
def test_report_is_interactive_in_chromium(name: str, experiments: dict[str, Path],
                                           reports: dict[str, Path], tmp_path: Path) -> None:
    """In a window narrower than the table: the plots drew, the timeline has a bar per trial,
    the metric menu switches the curves' data, a sort keeps the bold on the best trial, the
    filter box finds it, the page stays as wide as the window, plotly saves a PNG, and
    nothing was fetched."""
    exp = load_experiment(experiments[name])
    other = exp.reported_metrics[1]  # hpo.report's cost keys: cpu_hours first
    errors, found, _ = chromium_probe(reports[name], tmp_path, window="700,2400",
                                      metric=other, sort="best_score")
    assert errors == [] and "error" not in found, (errors, found.get("error"))
    assert found["plots"].keys() == {f"plot-{plot}" for plot in PLOTS}
    for plot, drawn in found["plots"].items():
        assert drawn["svgs"] >= 1 and drawn["drawn"] >= 1, (plot, drawn)
    trial_ids = list(exp.table["trial_id"])
    assert found["bars"] == len(trial_ids) and sorted(found["barTrials"]) == sorted(trial_ids)
    best = exp.curves[exp.curves["trial_id"] == trial_ids[0]]
    assert found["before"]["title"] == "score"
    assert found["before"]["y"] == pytest.approx(best["score"].tolist())
    assert found["menu"] == list(exp.reported_metrics)
    assert found["after"]["title"] == other
    assert found["after"]["y"] == pytest.approx(best[other].tolist())
    assert found["after"]["d"] != found["before"]["d"], "the drawn line moved"
    assert found["table"] == {"best": trial_ids[0], "firstRow": trial_ids[0]}
    sorted_ = found["sorted"]
    assert sorted_["best"] == trial_ids[0] and sorted_["bestAt"] == len(trial_ids) - 1
    assert [float(v) for v in sorted_["column"]] == sorted(float(v) for v in sorted_["column"])
    assert sorted_["bestWeight"] >= 700 and max(sorted_["otherWeights"]) < 700
    assert found["filtered"] == [trial_ids[0]]
    width = found["width"]
    assert width["page"] <= width["window"] and width["table"] > width["box"], width
    assert found["png"] == "data:image/png;base64,"
    assert found["resources"] == [], "offline: nothing fetched"


@pytest.mark.slow
def test_chromium_check_catches_external_loads(reports: dict[str, Path],
                                               tmp_path: Path) -> None:
    """The offline checks are not vacuous: a script or an image from elsewhere, added to a
    report, is refused by its policy, and the refusal is an error of the render check."""
    page = tmp_path / "external.html"
    page.write_text(reports["pbt"].read_text().replace(
        "</body>", "<script src='https://cdn.plot.ly/plotly-3.0.0.min.js'></script>"
        "<img src='http://127.0.0.1:9/x.png'></body>"))
    errors, _, _ = chromium_render(page, tmp_path)
    assert any("https://cdn.plot.ly/plotly-3.0.0.min.js" in e for e in errors), errors
    assert any("http://127.0.0.1:9/x.png" in e for e in errors), errors


@pytest.mark.slow
def test_chromium_check_catches_errors_and_blank_pages(tmp_path: Path) -> None:
    """The render check above is not vacuous: a script error and a blank page fail it."""
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    errors, _, pixels = chromium_render(page, tmp_path)
    assert any("undefinedFunction" in e for e in errors), errors
    assert pixels.std() < 0.01


@pytest.mark.slow
def test_rungs_and_cut_trials(experiments: dict[str, Path]) -> None:
    exp = load_experiment(experiments["asha"])
    furthest = exp.table["iterations"]
    assert (furthest < 6).any() and (furthest == 6).any(), "ASHA cut some trials, not all"
    from hpo.reporting.data import cut_trials, rung_occupancy

    occupancy = rung_occupancy(exp).set_index("rung")["trials"]
    assert list(occupancy.index) == [1, 2, 4, 6]
    for rung, count in occupancy.items():
        assert count == (furthest >= rung).sum()
    assert set(cut_trials(exp)) == set(exp.table.loc[furthest < 6, "trial_id"])


@pytest.mark.slow
def test_pbt_lineage_matches_pbt_log(experiments: dict[str, Path]) -> None:
    exp = load_experiment(experiments["pbt"])
    lines = (experiments["pbt"] / PBT_LOG).read_text().splitlines()
    assert len(lines) >= 1, "4 trials, 8 steps, interval 2: the bottom trial exploits"
    assert len(exp.exploits) == len(lines)
    ids = set(exp.table["trial_id"])
    for (_, hop), line in zip(exp.exploits.iterrows(), lines, strict=True):
        target, source, at, source_at, _, new = json.loads(line)
        assert {hop["trial_id"], hop["source_id"]} <= ids
        assert hop["trial_id"].endswith(f"_{int(target.split('_')[0]):05d}")
        assert hop["source_id"].endswith(f"_{int(source.split('_')[0]):05d}")
        assert (hop["iteration"], hop["source_iteration"], hop["new"]) == (at, source_at, new)


@pytest.mark.slow
def test_report_of_a_running_experiment(asha: dict[str, Any]) -> None:
    done = asha["live"]
    assert done.exit_code == 0, done.output
    assert "still running" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    page = asha["live_html"].read_text()
    assert "id='running'" in page and f"hpo resume {asha['dir']}" in page
    assert (asha["live_html"].parent / "live_figures" / "learning_curves.png").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["asha", "pbt"])
def test_tensorboard_has_every_report(name: str, experiments: dict[str, Path]) -> None:
    """Scalars per trial as Tune reported them, also for PBT's restarted trials."""
    for path in load_results(experiments[name])["path"]:
        reported = {r["training_iteration"]: r["score"] for r in trial_results(Path(path))}
        logged = tensorboard_scalars(Path(path), "ray/tune/score")
        assert logged.keys() == reported.keys(), path
        assert list(logged.values()) == pytest.approx(list(reported.values()), rel=1e-6)


@pytest.mark.slow
def test_optuna_mirror_matches_the_experiment(asha: dict[str, Any]) -> None:
    study = optuna.load_study(study_name="asha", storage=open_storage(str(asha["journal"])))
    table = load_results(asha["dir"]).set_index("trial_id")
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    mirrored = {t.user_attrs["ray_trial_id"]: t for t in study.trials}
    assert mirrored.keys() == set(table.index) and len(study.trials) == len(table)
    for trial_id, trial in mirrored.items():
        row = table.loc[trial_id]
        reports = {r["training_iteration"]: r["score"] for r in trial_results(Path(row["path"]))}
        assert trial.state == optuna.trial.TrialState.COMPLETE
        assert trial.value == pytest.approx(row["last_score"])
        assert trial.params == {"x": pytest.approx(row["config/x"])}
        assert trial.intermediate_values == pytest.approx(reports)


@pytest.mark.slow
def test_mirror_refuses_a_study_that_has_trials(asha: dict[str, Any], tmp_path: Path) -> None:
    space = tmp_path / "asha.yaml"
    space.write_text(yaml.safe_dump({**ASHA, "optuna_storage": str(asha["journal"])}))
    done = runner.invoke(app, ["run", str(space), "--storage", str(tmp_path / "r")])
    assert done.exit_code == 2, done.output
    assert "optuna_storage: cannot use it: study 'asha' there already has 8 trial(s)" in \
        done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists(), "nothing started"


@pytest.mark.slow
def test_output_folder_is_created(experiments: dict[str, Path], tmp_path: Path) -> None:
    html = tmp_path / "missing" / "deeper" / "r.html"
    done = runner.invoke(app, ["report", str(experiments["pbt"]), "-o", str(html)])
    assert done.exit_code == 0, done.output
    assert html.is_file() and (html.parent / "r_figures" / "learning_curves.png").is_file()


@pytest.mark.slow
def test_empty_experiment(experiments: dict[str, Path], tmp_path: Path) -> None:
    """A real experiment's files with its snapshot listing no trials (as right after start)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    source = experiments["hyperband"]
    (empty / "hpo-spec.yaml").write_text((source / "hpo-spec.yaml").read_text())
    state = json.loads(sorted(source.glob("experiment_state-*.json"))[-1].read_text())
    (empty / "experiment_state-x.json").write_text(json.dumps({**state, "trial_data": []}))
    done = runner.invoke(app, ["report", str(empty)])
    assert done.exit_code == 2 and "the experiment has no trials yet" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("folder", "expected"), [
    ("missing", "no such folder"),
    ("plain", "no hpo-spec.yaml here"),
    ("starting", "has not saved its first snapshot yet"),
])
def test_not_an_experiment(tmp_path: Path, folder: str, expected: str) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "starting").mkdir()
    (tmp_path / "starting" / "hpo-spec.yaml").write_text(yaml.safe_dump(PBT))
    done = runner.invoke(app, ["report", str(tmp_path / folder)])
    assert done.exit_code == 2, done.output
    assert expected in done.stderr and "Hint:" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*.html"))
