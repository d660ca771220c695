"""What a report shows, read from an experiment folder alone (no Ray, no running driver).

The saved spec is read as plain data, not re-validated: a report must work after the folder
was moved to a laptop, where the trainable or the `optuna_storage` path may not exist.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from hpo.errors import ExperimentError
from hpo.results import SPEC_FILE, load_results, metrics, objectives, saved_spec, trial_results
from hpo.spec.distributions import Distribution

UNFINISHED = ("RUNNING", "PENDING")
PBT_LOG = "pbt_global.txt"


@dataclass(frozen=True)
class Experiment:
    """One experiment as tables: trials (best first), reports, and PBT exploits."""

    path: Path
    spec: dict[str, Any]
    table: pd.DataFrame  # load_results: one row per trial, best first
    curves: pd.DataFrame  # one row per report: trial_id, training_iteration, metric, ...
    exploits: pd.DataFrame  # PBT: trial_id cloned source_id at iteration / source_iteration
    # every numeric metric some trial reported (a column of curves each), objectives first
    reported_metrics: tuple[str, ...] = field(default=())

    @property
    def objectives(self) -> list[tuple[str, str]]:
        """(metric, mode) of each objective; several: the report adds the Pareto front."""
        return objectives(self.spec)

    @property
    def metric(self) -> str:
        """The (first) objective's metric: curves, importance and the best trial use it."""
        return self.objectives[0][0]

    @property
    def mode(self) -> str:
        return self.objectives[0][1]

    @property
    def scheduler(self) -> dict[str, Any]:
        return dict(self.spec.get("scheduler") or {"type": "fifo"})

    @property
    def unfinished(self) -> int:
        """Trials the snapshot shows running or waiting: a live (or interrupted) run."""
        return int(self.table["status"].isin(UNFINISHED).sum())

    def space(self) -> dict[str, Distribution]:
        """The searched hyperparameters (PBT's mutations included) as hpo distributions."""
        entries = {**self.spec.get("search_space", {}),
                   **self.scheduler.get("hyperparam_mutations", {})}
        return {name: Distribution.model_validate(d) for name, d in entries.items()}


def load_experiment(path: str | Path) -> Experiment:
    """Read an experiment folder; clear errors for folders a report cannot be made of."""
    exp_dir = Path(path).expanduser().resolve()
    if not exp_dir.is_dir():
        raise ExperimentError(f"{exp_dir}: no such folder. Hint: check the path")
    spec = saved_spec(exp_dir)
    if not any(exp_dir.glob("experiment_state-*.json")):
        raise ExperimentError(f"{exp_dir}: the experiment has not saved its first snapshot yet "
                              f"({SPEC_FILE} but no experiment_state-*.json). Hint: if it is "
                              "starting, try again in a few seconds")
    table = load_results(exp_dir)
    if table.empty:
        raise ExperimentError(f"{exp_dir}: the experiment has no trials yet. Hint: if it is "
                              "running, try again once its first trials have started")
    # PBT's mutated keys may be missing from search_space; their values change over time.
    mutations = (spec.get("scheduler") or {}).get("hyperparam_mutations", {})
    space = list({**spec.get("search_space", {}), **mutations})
    goals = [metric for metric, _ in objectives(spec)]
    # One frame from all records: a frame per trial and pd.concat took minutes at 10,000.
    records = [record for trial_id, path in zip(table["trial_id"], table["path"], strict=True)
               for record in _curve(trial_id, Path(path), spec, goals, space)]
    curves = pd.DataFrame(records)  # a column per key any record has, in first-seen order
    reported = _reported(curves, goals)
    columns = ["trial_id", "training_iteration", *reported, *_TIMES, "time", "ranks",
               *(f"config/{k}" for k in space)]
    curves = curves.reindex(columns=list(dict.fromkeys(columns)))
    return Experiment(exp_dir, spec, table, curves, _exploits(exp_dir, table), reported)


# When and where each report was made: its UNIX time (hpo.report's own `report_time`, to the
# microsecond; Ray's whole-second `timestamp` for a report hpo.report did not make), the
# seconds since the trial (re)started, and the node (timeline and best-so-far over wall time).
_TIMES = ("timestamp", "time_since_restore", "hostname")
_OURS = frozenset({"trial_id", "training_iteration", "time", *_TIMES})


def _curve(trial_id: str, path: Path, spec: dict[str, Any], goals: list[str],
           space: list[str]) -> list[dict[str, Any]]:
    """One trial's reports: iteration, every numeric metric, the scheduler's time axis, when
    and where it was reported, and its config."""
    time_attr = (spec.get("scheduler") or {}).get("time_attr", "training_iteration")
    records = []
    for result in trial_results(path):
        config = result.get("config", {})
        records.append({
            **{k: _number(v) for k, v in metrics(result).items() if _is_number(v)},
            **{metric: _number(result.get(metric)) for metric in goals},  # Ray's keys too
            "trial_id": trial_id,
            "training_iteration": result.get("training_iteration"),
            "time": _number(result.get(time_attr)),
            "ranks": _number(result.get("ranks")),  # a data-parallel trial's (rasda: grows)
            "timestamp": _number(result.get("report_time", result.get("timestamp"))),
            "time_since_restore": _number(result.get("time_since_restore")),
            "hostname": result.get("hostname"),
            **{f"config/{k}": config.get(k) for k in space},
        })
    return records


def _reported(curves: pd.DataFrame, goals: list[str]) -> tuple[str, ...]:
    """The objectives, then every other metric some report gave a number for."""
    rest = [c for c in curves.columns if c not in goals and c not in _OURS
            and not str(c).startswith("config/") and curves[c].notna().any()]
    return (*goals, *rest)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any) -> float:
    return float(value) if _is_number(value) and math.isfinite(value) else math.nan


def _exploits(exp_dir: Path, table: pd.DataFrame) -> pd.DataFrame:
    """PBT's own exploit log (pbt_global.txt): who cloned whom, at which iterations."""
    columns = ["trial_id", "source_id", "iteration", "source_iteration", "old", "new"]
    log = exp_dir / PBT_LOG
    if not log.is_file():
        return pd.DataFrame(columns=columns)
    by_index = {_index(str(t)): str(t) for t in table["trial_id"]}
    rows = []
    for line in log.read_text().splitlines():
        try:
            target, source, at, source_at, old, new = json.loads(line)
        except (ValueError, TypeError):
            continue  # a line being written right now
        ids = by_index.get(_tag_index(target)), by_index.get(_tag_index(source))
        if None not in ids:
            rows.append([*ids, at, source_at, old, new])
    return pd.DataFrame(rows, columns=columns)


def _index(trial_id: str) -> int:
    # Ray numbers trials `<experiment>_<index:05d>`; PBT's log names them by `<index>_<params>`.
    return int(trial_id.rsplit("_", 1)[-1])


def _tag_index(tag: str) -> int:
    head = str(tag).split("_", 1)[0]
    return int(head) if head.isdigit() else -1


def rung_milestones(scheduler: dict[str, Any]) -> list[float]:
    """The rungs of ASHA / HyperBand in the scheduler's time unit (as Ray computes them)."""
    kind = scheduler.get("type")
    max_t: Any = scheduler.get("max_t")  # a number for each kind below that reads it
    if kind in ("asha", "rasda"):
        grace, factor = scheduler["grace_period"], scheduler["reduction_factor"]
        count = int(math.log(max_t / grace) / math.log(factor) + 1)
        rungs = {grace * factor**k for k in range(count)} | {max_t}
    elif kind == "hyperband":
        eta = scheduler["reduction_factor"]
        brackets = int(round(math.log(max_t) / math.log(eta))) + 1
        rungs = {int(max_t * eta**-s) for s in range(brackets)} - {0}
    else:
        return []
    return sorted(float(r) for r in rungs if r <= max_t)


def rung_occupancy(exp: Experiment) -> pd.DataFrame:
    """How many trials reached each rung (their furthest report on the time axis)."""
    furthest = exp.curves.groupby("trial_id")["time"].max()
    rungs = rung_milestones(exp.scheduler)
    counts = [int((furthest >= rung).sum()) for rung in rungs]
    return pd.DataFrame({"rung": rungs, "trials": counts})


def cut_trials(exp: Experiment) -> pd.Series:
    """Trial ids the scheduler stopped before the longest trial's last iteration."""
    table = exp.table
    longest = table["iterations"].max()
    stopped = table["status"].isin(["TERMINATED", "PAUSED"]) & (table["iterations"] < longest)
    return table.loc[stopped, "trial_id"]
