"""The learning-curve figure with one report per trial (points, not an empty frame) and with
thousands of trials (the best drawn, the rest one band), the wall-time tables (best so far,
the timeline's rows), from tables alone (no Ray); a whole report of thousands of trials
(size, time, and in Chromium)."""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection, PolyCollection
from report_helpers import chromium_probe, without_plotly_js, write_experiment

from hpo.reporting import build_report, figures, walltime
from hpo.reporting.data import Experiment


def _experiment(trials: int, iterations: int) -> Experiment:
    ids = [f"exp_{i:05d}" for i in range(trials)]
    best = np.linspace(1.0, 0.0, trials)  # table order: best first
    table = pd.DataFrame({"trial_id": ids, "status": "TERMINATED", "iterations": iterations,
                          "best_acc": best})
    curves = pd.DataFrame([{"trial_id": t, "training_iteration": it, "acc": b * it / iterations,
                            "time": float(it)}
                           for t, b in zip(ids, best, strict=True)
                           for it in range(1, iterations + 1)])
    spec = {"name": "exp", "metric": "acc", "mode": "max", "scheduler": {"type": "fifo"}}
    return Experiment(Path("/nowhere"), spec, table, curves, pd.DataFrame())


def _drawn_points(fig: plt.Figure) -> list[int]:
    return [len(line.get_xdata()) for line in fig.axes[0].get_lines() if len(line.get_xdata())]


def test_one_report_per_trial_is_drawn_as_points() -> None:
    fig = figures.learning_curves(_experiment(trials=3, iterations=1))
    lines = [line for line in fig.axes[0].get_lines() if len(line.get_xdata())]
    assert len(lines) == 3 and {line.get_marker() for line in lines} == {"o"}
    plt.close(fig)


def test_thousands_of_trials_draw_the_best_and_band_the_rest() -> None:
    fig = figures.learning_curves(_experiment(trials=2000, iterations=3))
    ax = fig.axes[0]
    assert _drawn_points(fig) == [3] * 50  # the best 50 trials, one line each
    assert "best 50 of 2000 drawn" in ax.get_title()
    band = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(band) == 1
    assert "the other 1950 trials" in " ".join(t.get_text() for t in ax.get_legend().texts)
    plt.close(fig)


@pytest.mark.perf
def test_thousands_of_trials_draw_in_seconds() -> None:
    experiment = _experiment(trials=2000, iterations=3)
    start = time.perf_counter()
    fig = figures.learning_curves(experiment)
    elapsed = time.perf_counter() - start
    plt.close(fig)
    assert elapsed < 20, f"{elapsed:.1f} s for 2000 trials"


def test_thousands_of_one_report_trials_show_the_rest_as_points() -> None:
    fig = figures.learning_curves(_experiment(trials=2000, iterations=1))
    ax = fig.axes[0]
    scattered = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert len(scattered) == 1 and len(scattered[0].get_offsets()) == 1950
    assert _drawn_points(fig) == [1] * 50
    plt.close(fig)


def _timed(rows: list[tuple[str, str, float, float]], mode: str = "max") -> Experiment:
    """Trials with (trial_id, hostname, report time, value) reports, 1 s per iteration."""
    curves = pd.DataFrame([{"trial_id": t, "hostname": h, "timestamp": ts, "acc": v,
                            "time_since_restore": 1.0, "training_iteration": 1}
                           for t, h, ts, v in rows])
    ids = list(dict.fromkeys(curves["trial_id"]))
    table = pd.DataFrame({"trial_id": ids, "status": "TERMINATED"})
    spec = {"name": "exp", "metric": "acc", "mode": mode, "scheduler": {"type": "fifo"}}
    return Experiment(Path("/nowhere"), spec, table, curves, pd.DataFrame(), ("acc",))


@pytest.mark.parametrize(("mode", "best"), [("max", [3.0, 5.0, 5.0]), ("min", [3.0, 1.0, 1.0])])
def test_best_so_far_follows_the_mode(mode: str, best: list[float]) -> None:
    exp = _timed([("a", "n", 10, 3.0), ("b", "n", 12, 1.0), ("a", "n", 11, 5.0),
                  ("b", "n", 13, 2.0)], mode)
    line = walltime.best_so_far(exp)  # one row per improvement and one at the end
    assert line["best"].tolist() == best and line["timestamp"].tolist() == [10, 11 if
                                                                               mode == "max"
                                                                               else 12, 13]
    bests = walltime.trial_bests(exp).set_index("trial_id")["acc"]
    assert bests.to_dict() == ({"a": 5.0, "b": 2.0} if mode == "max" else {"a": 3.0, "b": 1.0})


def test_timeline_packs_each_nodes_trials_into_rows() -> None:
    """Two at a time on n1 (a third after one ended: its row again), one on n2."""
    exp = _timed([("a", "n1", 110, 0), ("b", "n1", 105, 0), ("c", "n1", 120, 0),
                  ("d", "n2", 101, 0), ("a", "n1", 101, 0), ("b", "n1", 102, 0),
                  ("c", "n1", 112, 0)])
    spans = walltime.trial_spans(exp).set_index("trial_id")
    assert spans.loc["a", ["start", "end"]].tolist() == [100.0, 110.0]  # 1 s before 1st
    spans["lane"] = walltime.lanes(spans)
    assert spans["lane"].to_dict() == {"a": "n1 #0", "b": "n1 #1", "c": "n1 #1", "d": "n2 #0"}
    assert walltime.busy_share(spans, 3) == pytest.approx((10 + 4 + 9 + 1) / (3 * 20))


@pytest.fixture(scope="module")
def big_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """`hpo report` of 2000 trials (3 reports each, 8 at a time on each of 4 nodes)."""
    exp = write_experiment(tmp_path_factory.mktemp("big"), trials=2000, iterations=3)
    start = time.perf_counter()
    report = build_report(exp)
    return report.html, time.perf_counter() - start


@pytest.mark.slow  # the whole report of 2,000 trials takes about 10 s to build
def test_thousands_of_trials_make_a_page_of_sane_size(big_report: tuple[Path, float]) -> None:
    page = big_report[0]
    text = page.read_text()
    rest = without_plotly_js(text)
    assert len(text) - len(rest) < 6_000_000, "plotly.js once"
    assert len(rest) < 2_000_000, f"{len(rest)} characters besides plotly.js"
    assert rest.count("<tr") == 2001


@pytest.mark.perf
def test_thousands_of_trials_make_a_page_in_minutes(big_report: tuple[Path, float]) -> None:
    elapsed = big_report[1]
    assert elapsed < 120, f"{elapsed:.1f} s for 2000 trials"


@pytest.mark.slow
@pytest.mark.perf
def test_thousands_of_trials_render_in_chromium(big_report: tuple[Path, float],
                                               tmp_path: Path) -> None:
    errors, found, elapsed = chromium_probe(big_report[0], tmp_path, metric="loss",
                                            sort="trial_id")
    assert errors == [] and "error" not in found, (errors, found.get("error"))
    assert found["bars"] == 2000 and len(set(found["barTrials"])) == 2000
    assert all(p["drawn"] >= 1 for p in found["plots"].values()), found["plots"]
    assert found["after"]["title"] == "loss" and found["after"]["y"] != found["before"]["y"]
    assert found["sorted"]["best"] == found["table"]["best"]
    assert found["resources"] == []
    assert elapsed < 60, f"Chromium took {elapsed:.1f} s"
