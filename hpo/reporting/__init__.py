"""`hpo report`: an experiment folder -> one self-contained HTML page plus PNG figures.

Example:
    >>> from hpo.reporting import build_report
    >>> report = build_report("hpo-results/digits-asha")  # writes .../report.html
    >>> report.html, report.figures
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpo.errors import ExperimentError
from hpo.reporting.data import Experiment, load_experiment

__all__ = ["Report", "build_report"]
REPORT_FILE = "report.html"


@dataclass(frozen=True)
class Report:
    """What `build_report` wrote: the page, its PNGs, and the state it showed."""

    html: Path
    figures: list[Path] = field(default_factory=list)
    trials: int = 0
    unfinished: int = 0
    notes: dict[str, str] = field(default_factory=dict)


def build_report(experiment_dir: str | Path, output: str | Path | None = None) -> Report:
    """Write `output` (default EXPERIMENT_DIR/report.html) and `<stem>_figures/*.png` beside it
    (the matplotlib figures, for papers; the page's interactive ones save PNGs themselves)."""
    exp = load_experiment(experiment_dir)
    html_path = Path(output).expanduser() if output else exp.path / REPORT_FILE
    if html_path.is_dir():
        raise ExperimentError(f"-o {html_path}: is a folder. Hint: name a file, e.g. "
                              f"{html_path / REPORT_FILE}")
    html_path.parent.mkdir(parents=True, exist_ok=True)  # `-o new/dir/x.html` makes it
    sections, notes = _sections(exp)
    figure_dir = html_path.with_name(f"{html_path.stem}_figures")
    figure_dir.mkdir(exist_ok=True)
    pngs = []
    for section in sections:
        if section.png:
            pngs.append(figure_dir / f"{section.name}.png")
            pngs[-1].write_bytes(section.png)
    from hpo.reporting.html import page

    html_path.write_text(page(exp, sections, notes), encoding="utf-8")
    return Report(html_path, pngs, len(exp.table), exp.unfinished, notes)


def _sections(exp: Experiment) -> tuple[list[Any], dict[str, str]]:
    """Every figure that applies to this experiment, and a note for each that could not be."""
    from hpo.reporting import analysis, figures, interactive
    from hpo.reporting.html import Section

    study = analysis.as_study(exp)
    scores = analysis.importances(study)
    drawn = [  # name, title, PNG (matplotlib), interactive (plotly; shown instead), caption
        ("pareto_front", "Pareto front", figures.pareto_front(exp), None,
         "Each finished trial's last values of the first two objectives; red: the trials no "
         "other beats on every objective, joined in order."),
        ("learning_curves", "Learning curves", figures.learning_curves(exp),
         interactive.learning_curves(exp),
         f"The best {interactive.CURVES_MAX} trials by {exp.metric} as lines (any others: "
         "their range per iteration, grey). The menu switches the metric. x: stopped early by "
         "the scheduler; open circle: still running; red X: failed. A click on a trial in the "
         "legend hides it, a double-click shows it alone; drag to zoom, double-click to reset; "
         "the camera button saves a PNG."),
        ("best_over_time", "Best so far over wall time", None, interactive.best_over_time(exp),
         f"Grey: each trial's best report of {exp.metric} when it was made; red: the best so "
         f"far ({exp.mode}). Report times are Ray's (whole seconds), in this machine's zone."),
        ("timeline", "Trials per node over wall time", None, interactive.timeline(exp),
         "One bar per trial, from its start to its last report, on rows per node: each node's "
         "trials packed into as few rows as do not overlap, so a row is about one slot and a "
         "gap in it is time the slot sat idle. A paused (PBT) trial's bar covers its pause."),
        ("rungs", "Rung occupancy", figures.rungs(exp), None,
         "Trials whose furthest report reached each rung of the successive-halving ladder."),
        ("ranks", "Ranks per trial", figures.rank_growth(exp), None,
         "Each data-parallel trial's rank count over its iterations: rasda grows a trial at "
         "each rung it passes."),
        ("pbt_lineage", "PBT lineage", figures.pbt_lineage(exp), None,
         "Top: each trial's iterations; arrows from the trial it cloned (at its iteration) to "
         "the trial that exploited it. Below: each mutated hyperparameter over time."),
        ("parallel_coordinates", "Hyperparameters against the metric",
         figures.parallel_coordinates(exp, study), None, "Axes scaled to the searched range "
         "(log scale for log-distributed hyperparameters); values are each trial's final "
         "config and best metric."),
        ("importance", "Hyperparameter importance",
         figures.importance(scores) if isinstance(scores, dict) else None, None,
         "Optuna's fANOVA evaluator over the trials' final configs (log-distributed ones as "
         "their logarithm) and best metric (a seeded random 500 of them beyond 500 trials)."),
    ]
    notes = {} if isinstance(scores, dict) else {"importance": f"Importance: {scores}"}
    return [Section(name, title, _png(fig) if fig else b"", caption,
                    interactive.div(plot, name) if plot else "")
            for name, title, fig, plot, caption in drawn if fig or plot], notes


def _png(figure: Any) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()
