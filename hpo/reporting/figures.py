"""The report's figures, drawn with matplotlib (Agg: no display, no browser on compute nodes).

Each function returns a Figure, or None when the figure does not apply to this experiment
(rungs without ASHA/HyperBand, lineage without PBT, the Pareto front with one objective).
Trials keep one colour by rank everywhere: bright is good, whatever the mode.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: never look for a display

import matplotlib.pyplot as plt  # noqa: E402
import optuna  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from optuna.distributions import CategoricalDistribution  # noqa: E402

from hpo.reporting.data import UNFINISHED, Experiment, cut_trials, rung_occupancy  # noqa: E402

_LEGEND_MAX = 12  # beyond this many trials a legend hides the plot
_CURVES_MAX = 50  # beyond this many trials the others are drawn as one band


def _colors(exp: Experiment) -> dict[str, Any]:
    """One colour per trial by rank (table order is best first)."""
    ids = list(exp.table["trial_id"])
    cmap = plt.get_cmap("viridis")
    return {t: cmap(1 - i / max(len(ids) - 1, 1) * 0.9) for i, t in enumerate(ids)}


def learning_curves(exp: Experiment, drawn: int = _CURVES_MAX) -> Figure:
    """The best `drawn` trials' metric per iteration (one report: a point); where the scheduler
    cut a trial, an x. Beyond that many trials the others are one grey band (their range at
    each iteration), which the title and legend say: 2000 lines would be one blot."""
    fig, ax = plt.subplots(figsize=(9, 4.8))
    colors, cut = _colors(exp), set(cut_trials(exp))
    status = dict(zip(exp.table["trial_id"], exp.table["status"], strict=True))
    ids = list(exp.table["trial_id"])
    # Split only the drawn trials' reports: a frame per trial took minutes at 10,000 trials.
    reports = exp.curves.dropna(subset=[exp.metric])
    top = reports["trial_id"].isin(ids[:drawn])
    curves = dict(tuple(reports[top].groupby("trial_id", sort=False)))
    for rank, trial_id in enumerate(ids[:drawn]):
        curve = curves.get(trial_id)
        if curve is None or curve.empty:
            continue
        x, y = curve["training_iteration"], curve[exp.metric]
        ax.plot(x, y, color=colors[trial_id], lw=2.4 if rank == 0 else 1.2,
                marker="o" if len(curve) == 1 else None, ms=5,  # a line needs two points
                label=trial_id if len(ids) <= _LEGEND_MAX else None, zorder=3 - rank / 1e3)
        marker = _end_marker(status[trial_id], trial_id in cut)
        if marker:
            ax.plot(x.iloc[-1], y.iloc[-1], **marker, zorder=4)
    if len(ids) > drawn and not reports[~top].empty:
        _band(ax, reports[~top], exp.metric, len(ids) - drawn)
    _marker_legend(ax, status, cut)
    shown = f"best {drawn} of {len(ids)} drawn" if len(ids) > drawn else f"{len(ids)} trials"
    ax.set(xlabel="training iteration", ylabel=exp.metric,
           title=f"Learning curves ({shown}, best drawn thick)")
    ax.legend(fontsize=7, ncol=2, loc="best")
    ax.grid(alpha=0.3)
    return fig


def _band(ax: Any, reports: pd.DataFrame, metric: str, trials: int) -> None:
    """The trials not drawn: their range at each iteration (points where only one)."""
    span = reports.groupby("training_iteration")[metric].agg(["min", "max"])
    label = f"the other {trials} trials: range per iteration"
    if len(span) > 1:
        ax.fill_between(span.index, span["min"], span["max"], color="grey", alpha=0.3,
                        lw=0, label=label, zorder=1)
    else:
        ax.scatter(reports["training_iteration"], reports[metric], color="grey", s=6,
                   alpha=0.4, label=label, zorder=1)


def _marker_legend(ax: Any, status: dict[str, str], cut: set[str]) -> None:
    shown = {"cut": bool(cut), "ERROR": "ERROR" in status.values(),
             "RUNNING": any(s in UNFINISHED for s in status.values())}
    for key, label in (("cut", "stopped by the scheduler"), ("ERROR", "failed"),
                       ("RUNNING", "still running")):
        if shown[key]:  # legend entries for the markers that occur
            ax.plot([], [], ls="none", label=label, **_end_marker(key, key == "cut"))


def _end_marker(status: str, cut: bool) -> dict[str, Any]:
    if status == "ERROR":
        return {"marker": "X", "color": "red", "ms": 9}
    if status in UNFINISHED:
        return {"marker": "o", "mfc": "none", "mec": "black", "ms": 8}
    return {"marker": "x", "color": "black", "ms": 8, "mew": 2} if cut else {}


def rungs(exp: Experiment) -> Figure | None:
    """ASHA/HyperBand: how many trials reached each rung."""
    occupancy = rung_occupancy(exp)
    if occupancy.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.8))
    labels = [f"{r:g}" for r in occupancy["rung"]]
    bars = ax.bar(labels, occupancy["trials"], color="#3b7dd8")
    ax.bar_label(bars)
    unit = exp.scheduler.get("time_attr", "training_iteration")
    ax.set(xlabel=f"rung ({unit})", ylabel="trials that reached it",
           title=f"{exp.scheduler['type'].upper()} rung occupancy ({len(exp.table)} trials)")
    return fig


def rank_growth(exp: Experiment) -> Figure | None:
    """Data-parallel trials whose rank count changed (rasda): ranks over iterations."""
    ranks = exp.curves.dropna(subset=["ranks"])
    if ranks.empty or ranks["ranks"].nunique() < 2:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.8))
    colors = _colors(exp)
    for trial_id, curve in ranks.groupby("trial_id", sort=False):
        ax.step(curve["training_iteration"], curve["ranks"], where="post",
                color=colors[trial_id], lw=1.3)
    ax.set(xlabel="training iteration", ylabel="ranks", yscale="log", title="Ranks per trial")
    counts = sorted(ranks["ranks"].unique())
    ax.set_yticks(counts, [f"{c:g}" for c in counts])
    ax.grid(alpha=0.3)
    return fig


def pbt_lineage(exp: Experiment) -> Figure | None:
    """PBT/PB2: who cloned whom (arrows) and each mutated hyperparameter over time."""
    mutated = list(exp.scheduler.get("hyperparam_mutations", {}))
    if exp.scheduler.get("type") not in ("pbt", "pb2") or not mutated:
        return None
    fig, axes = plt.subplots(1 + len(mutated), 1, figsize=(9, 3 + 2.4 * len(mutated)),
                             sharex=True, squeeze=False)
    _population(axes[0][0], exp)
    colors = _colors(exp)
    for ax, name in zip(axes[1:, 0], mutated, strict=True):
        for trial_id, curve in exp.curves.groupby("trial_id", sort=False):
            ax.step(curve["training_iteration"], curve[f"config/{name}"], where="post",
                    color=colors[trial_id], lw=1.3)
        ax.set(ylabel=name, yscale="log" if "log" in _kind(exp, name) else "linear")
        ax.grid(alpha=0.3)
    axes[-1][0].set_xlabel("training iteration")
    return fig


def _kind(exp: Experiment, name: str) -> str:
    dist = exp.space().get(name)
    return dist.kind if dist else ""


def _population(ax: Any, exp: Experiment) -> None:
    ids = list(exp.table["trial_id"])
    row = {t: i for i, t in enumerate(ids)}
    colors = _colors(exp)
    for trial_id, curve in exp.curves.groupby("trial_id", sort=False):
        its = curve["training_iteration"]
        ax.plot([its.min(), its.max()], [row[trial_id]] * 2, color=colors[trial_id], lw=4)
    for _, hop in exp.exploits.iterrows():
        ax.annotate("", xy=(hop["iteration"], row[hop["trial_id"]]),
                    xytext=(hop["source_iteration"], row[hop["source_id"]]),
                    arrowprops={"arrowstyle": "->", "color": "black", "lw": 1})
    ax.set_yticks(range(len(ids)), ids, fontsize=7)
    ax.invert_yaxis()
    ax.set_title(f"PBT lineage: {len(exp.exploits)} exploit(s), arrow from the cloned trial")


def parallel_coordinates(exp: Experiment, study: optuna.Study) -> Figure | None:
    """Each trial a line through its hyperparameters (scaled per axis) and its metric."""
    trials = study.get_trials(deepcopy=False)
    names = [n for n in exp.space() if trials and n in trials[0].distributions]
    if not names:
        return None
    values = [t.value for t in trials]
    low, high = min(values), max(values)
    fig, ax = plt.subplots(figsize=(max(6, 2 * len(names) + 3), 4.5))
    cmap = plt.get_cmap("viridis")
    lines, colors = [], []
    for trial in sorted(trials, key=lambda t: t.value if exp.mode == "max" else -t.value):
        ys = [_scaled(trial.distributions[n], trial.params[n]) for n in names]
        share = (trial.value - low) / (high - low) if high > low else 1.0
        lines.append(list(enumerate([*ys, share])))
        colors.append(cmap(share if exp.mode == "max" else 1 - share))
    # One artist for all lines, best drawn last (on top): a Line2D each was slow at 10,000.
    ax.add_collection(LineCollection(lines, colors=colors, linewidths=1.5, alpha=0.85))
    ax.set_xlim(-0.2, len(names) + 0.2)
    for i, name in enumerate(names):
        _axis_labels(ax, i, trials[0].distributions[name])
    ax.text(len(names), -0.06, f"{low:.4g}", ha="center", va="top", fontsize=7)
    ax.text(len(names), 1.04, f"{high:.4g}", ha="center", fontsize=7)
    dists = [trials[0].distributions[n] for n in names]
    ax.set_xticks(range(len(names) + 1), [*(f"{n}\n(log)" if getattr(d, "log", False) else n
                                            for n, d in zip(names, dists, strict=True)),
                                          exp.metric])
    ax.set(yticks=[], ylim=(-0.12, 1.12), title="Hyperparameters against the metric "
           "(one line per trial, bright = good)")
    for i in range(len(names) + 1):
        ax.axvline(i, color="grey", lw=0.8)
    return fig


def _scaled(dist: Any, value: Any) -> float:
    """Position in [0, 1] on the hyperparameter's axis (log scale for log distributions)."""
    if isinstance(dist, CategoricalDistribution):
        return dist.choices.index(value) / max(len(dist.choices) - 1, 1)
    low, high, value = float(dist.low), float(dist.high), float(value)
    if dist.log:
        low, high, value = math.log(low), math.log(high), math.log(value)
    return (value - low) / (high - low) if high > low else 0.5


def _axis_labels(ax: Any, i: int, dist: Any) -> None:
    if isinstance(dist, CategoricalDistribution):
        for choice in dist.choices:
            ax.text(i + 0.03, _scaled(dist, choice), str(choice), fontsize=7, va="center")
        return
    ax.text(i, -0.06, f"{dist.low:.3g}", ha="center", va="top", fontsize=7)
    ax.text(i, 1.04, f"{dist.high:.3g}", ha="center", fontsize=7)
    # The middle of the axis: the geometric mean on a log axis (1e-3 between 1e-5 and 1e-1).
    middle = math.sqrt(dist.low * dist.high) if dist.log else (dist.low + dist.high) / 2
    ax.text(i + 0.03, 0.5, f"{middle:.3g}", fontsize=7, va="center")


def importance(scores: dict[str, float]) -> Figure:
    """Horizontal bars of Optuna's importance scores, largest on top."""
    names = list(scores)[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(names) + 1.6))
    bars = ax.barh(names, [scores[n] for n in names], color="#3b7dd8")
    ax.bar_label(bars, fmt="%.2f")
    ax.set(xlabel="importance (fANOVA, sums to 1)", xlim=(0, 1.1),
           title="Hyperparameter importance")
    return fig


def pareto_front(exp: Experiment) -> Figure | None:
    """The first two objectives of each finished trial (their last values, as Optuna was
    told), the Pareto front marked and joined; None with one objective."""
    if len(exp.objectives) < 2 or "pareto_front" not in exp.table:
        return None
    (x_name, x_mode), (y_name, y_mode) = exp.objectives[:2]
    table = exp.table.dropna(subset=[f"last_{x_name}", f"last_{y_name}"])
    on = table[table["pareto_front"].astype(bool)].sort_values(f"last_{x_name}")
    off = table[~table["pareto_front"].astype(bool)]
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(off[f"last_{x_name}"], off[f"last_{y_name}"], color="grey", alpha=0.6, s=18,
               label=f"other trials ({len(off)})")
    # With more than two objectives a front point may look dominated in this projection.
    ax.plot(on[f"last_{x_name}"], on[f"last_{y_name}"], color="#d62728", marker="o", ms=6,
            lw=1.2, label=f"Pareto front ({len(on)})", zorder=3)
    ax.set(xlabel=f"{x_name} ({x_mode})", ylabel=f"{y_name} ({y_mode})",
           title=f"Pareto front: {x_name} against {y_name}")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    return fig
