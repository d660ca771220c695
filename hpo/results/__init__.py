"""Results of an experiment folder as pandas DataFrames, read from files alone (no Ray).

Works while the experiment runs, after it was moved, and after the driver died: trial
states come from Tune's latest experiment snapshot, every reported metric from each trial's
result.json (read once per trial).

With several objectives (`metric: [a, b]`) the table has last_/best_ columns for each and a
`pareto_front` column: the finished trials no other finished trial beats on every objective
(by their last values, which are what Optuna was told); those come first.

With `checkpoint.keep_best`, each trial's folder also holds `best_checkpoint/`: a copy of
its best-scoring checkpoint (hpo.driver.plugins.best_checkpoint writes it), with
`hpo_best.json` saying its metric, mode, score and training_iteration.

Example:
    >>> results = load("hpo-results/digits-asha")
    >>> results.trials, results.curves, results.best_config, results.best_checkpoint
"""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpo.errors import ExperimentError
from hpo.results.best import (
    best_checkpoint,
    best_config,
    front,
    kept_best,
    never_a_number,
    plain,
    row_config,
)
from hpo.results.files import (
    BEST_CHECKPOINT,
    BEST_RECORD,
    BOOKKEEPING,
    SPEC_FILE,
    SWAPPED_OUT,
    flat,
    is_number,
    metrics,
    objectives,
    saved_spec,
    snapshot,
    trial_results,
)

if TYPE_CHECKING:  # pandas takes 0.3 s to import: `hpo run` loads it after Ray has started
    import pandas as pd

__all__ = [
    "BEST_CHECKPOINT", "BEST_RECORD", "BOOKKEEPING", "SPEC_FILE", "SWAPPED_OUT", "Results",
    "best_checkpoint", "best_config", "front", "kept_best", "load", "load_curves",
    "load_results", "loading", "metrics", "never_a_number", "objectives", "plain",
    "row_config", "saved_spec", "trial_results",
]

_Trial = tuple[dict[str, Any], list[dict[str, Any]]]  # a snapshot's trial and its results


def _row(trial: dict[str, Any], curve: list[dict[str, Any]], exp_dir: Path,
         goals: list[tuple[str, str]]) -> dict[str, Any]:
    last = curve[-1] if curve else {}
    row = {"trial_id": trial["trial_id"], "status": trial["status"]}
    row.update({f"config/{k}": v for k, v in flat(trial["config"]).items()})
    for metric, mode in goals:
        values = [r[metric] for r in curve if is_number(r.get(metric))]
        pick = max if mode == "max" else min
        row[f"last_{metric}"] = values[-1] if values else None
        row[f"best_{metric}"] = pick(values) if values else None
    row.update({
        "iterations": last.get("training_iteration", 0),
        "time_total_s": last.get("time_total_s"),
        "hostname": last.get("hostname"),
        "path": str(exp_dir / trial["relative_logdir"]),
    })
    reported: dict[str, Any] = {}
    for result in curve:  # each metric's last value, also where a later result lacks it
        reported.update(metrics(result))
    row.update({k: v for k, v in reported.items() if k not in row})  # ours win a clash
    return row




def _read(exp_dir: str | Path) -> tuple[Path, dict[str, Any], list[_Trial]]:
    """The folder, its spec and each trial of the latest snapshot with its results."""
    exp_dir = Path(exp_dir).expanduser().resolve()
    if not exp_dir.is_dir():
        raise ExperimentError(f"{exp_dir}: no such folder. Hint: check the path")
    spec = saved_spec(exp_dir)
    trials = [json.loads(pair[0]) for pair in snapshot(exp_dir)["trial_data"]]
    return exp_dir, spec, [(t, trial_results(exp_dir / t["relative_logdir"])) for t in trials]


def _table(exp_dir: Path, spec: dict[str, Any], trials: list[_Trial]) -> pd.DataFrame:
    import pandas as pd

    goals = objectives(spec)
    frame = pd.DataFrame([_row(t, curve, exp_dir, goals) for t, curve in trials])
    if frame.empty:
        return frame
    metric, mode = goals[0]
    # A tie goes to the smaller trial id, as in the live view (hpo.driver.plugins.progress).
    order, ascending = [f"best_{metric}", "trial_id"], [mode == "min", True]
    if len(goals) > 1:  # the front first, each part by the first objective's last value
        frame = _mark_front(frame, goals)
        order, ascending = ["pareto_front", f"last_{metric}"], [False, mode == "min"]
    frame = frame.sort_values(order, ascending=ascending, na_position="last", kind="stable")
    # metric/mode: the first objective, which orders the table and picks best_config.
    frame.attrs.update(metric=metric, mode=mode, objectives=goals, name=spec["name"])
    return frame.reset_index(drop=True)


def _mark_front(frame: pd.DataFrame, goals: list[tuple[str, str]]) -> pd.DataFrame:
    """A `pareto_front` column after the objectives': finished trials with every objective
    reported and finite, that no other such trial dominates."""
    import numpy as np
    import pandas as pd

    from hpo.optuna.pareto import on_front

    lasts = frame[[f"last_{m}" for m, _ in goals]].apply(pd.to_numeric, errors="coerce")
    done = frame["status"].eq("TERMINATED") & np.isfinite(lasts).all(axis=1)
    marks = on_front(lasts[done].to_numpy().tolist(), [mode for _, mode in goals])
    front = pd.Series(marks, index=frame.index[done], dtype=bool).reindex(frame.index,
                                                                         fill_value=False)
    frame.insert(frame.columns.get_loc(f"best_{goals[-1][0]}") + 1, "pareto_front", front)
    return frame


def _curves(trials: list[_Trial], order: list[str]) -> pd.DataFrame:
    """One row per (trial_id, training_iteration), trials in `order` (best first)."""
    import pandas as pd

    by_id = {t["trial_id"]: curve for t, curve in trials}
    # One frame from all records: a frame per trial and pd.concat took minutes at 10,000.
    records = [{"trial_id": trial_id, "training_iteration": r.get("training_iteration"),
                "time_total_s": r.get("time_total_s"), **metrics(r)}
               for trial_id in order for r in by_id[trial_id]]
    return pd.DataFrame(records, columns=None if records else
                        ["trial_id", "training_iteration", "time_total_s"])


def load_results(exp_dir: str | Path) -> pd.DataFrame:
    """One row per trial, best first: config/*, last_/best_<metric>, iterations, status, and
    each metric the trial reported (its last value)."""
    return _table(*_read(exp_dir))


def loading(exp_dir: str | Path) -> Future[pd.DataFrame]:
    """load_results, in a thread of its own from now on: a run's end reads its results while
    Ray stops and the run's temp folder is removed (each about 0.4 s at 640 trials on 2 cores).
    Call it once the experiment folder holds its last snapshot."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="hpo-results")
    try:
        return pool.submit(load_results, exp_dir)
    finally:
        pool.shutdown(wait=False)


def load_curves(exp_dir: str | Path) -> pd.DataFrame:
    """Every report: one row per (trial_id, training_iteration), a column per metric."""
    return load(exp_dir).curves


@dataclass(frozen=True)
class Results:
    """An experiment's trials (one row each, best first) and curves (one row per report)."""

    path: Path
    trials: pd.DataFrame
    curves: pd.DataFrame

    @property
    def best_config(self) -> dict[str, Any]:
        """The best trial's config, nested as the trainable saw it (several objectives: the
        front's best on the first objective)."""
        return best_config(self.trials)

    @property
    def pareto_front(self) -> pd.DataFrame:
        """The trials on the Pareto front (several objectives; with one, the best trial)."""
        return front(self.trials)

    @property
    def best_checkpoint(self) -> Path:
        """The best trial's best checkpoint folder (`checkpoint.keep_best: true`); load it
        with `hpo.load_checkpoint`. The trial is best_config's."""
        return best_checkpoint(self.path, self.trials)


def load(exp_dir: str | Path) -> Results:
    """Both tables of an experiment folder, from one read of its files."""
    exp_dir, spec, trials = _read(exp_dir)
    table = _table(exp_dir, spec, trials)
    return Results(exp_dir, table, _curves(trials, list(table.get("trial_id", []))))
