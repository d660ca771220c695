"""The learning-curve figure with one report per trial (points, not an empty frame) and with
thousands of trials (the best drawn, the rest one band), from tables alone (no Ray)."""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.collections import PathCollection, PolyCollection

from hpo.reporting import figures
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
    start = time.perf_counter()
    fig = figures.learning_curves(_experiment(trials=2000, iterations=3))
    elapsed = time.perf_counter() - start
    ax = fig.axes[0]
    assert _drawn_points(fig) == [3] * 50  # the best 50 trials, one line each
    assert "best 50 of 2000 drawn" in ax.get_title()
    band = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(band) == 1
    assert "the other 1950 trials" in " ".join(t.get_text() for t in ax.get_legend().texts)
    assert elapsed < 20, f"{elapsed:.1f} s for 2000 trials"
    plt.close(fig)


def test_thousands_of_one_report_trials_show_the_rest_as_points() -> None:
    fig = figures.learning_curves(_experiment(trials=2000, iterations=1))
    ax = fig.axes[0]
    scattered = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert len(scattered) == 1 and len(scattered[0].get_offsets()) == 1950
    assert _drawn_points(fig) == [1] * 50
    plt.close(fig)
