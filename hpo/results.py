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

import contextlib
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from hpo.errors import ExperimentError, not_a_number

if TYPE_CHECKING:  # pandas takes 0.3 s to import: `hpo run` loads it after Ray has started
    import pandas as pd

SPEC_FILE = "hpo-spec.yaml"
# What Ray adds to every result: not metrics of the trainable. `training_iteration` and
# `time_total_s` are the curves' own columns.
BOOKKEEPING = frozenset({
    "time_this_iter_s", "time_total_s", "time_since_restore", "iterations_since_restore",
    "timesteps_total", "timesteps_since_restore", "episodes_total", "training_iteration",
    "pid", "hostname", "node_ip", "date", "timestamp", "done", "trial_id", "experiment_id",
    "experiment_tag", "config", "checkpoint_dir_name", "should_checkpoint",
    "report_time",  # hpo.report's own clock (hpo.trial.cost.REPORT_TIME)
})
_Trial = tuple[dict[str, Any], list[dict[str, Any]]]  # a snapshot's trial and its results
BEST_CHECKPOINT = "best_checkpoint"  # <trial>/best_checkpoint: checkpoint.keep_best's copy
BEST_RECORD = "hpo_best.json"  # in it: metric, mode, score and training_iteration
SWAPPED_OUT = ".best_checkpoint.old"  # the previous best, while a better one is put in place


def _snapshot(exp_dir: Path, timeout_s: float = 5.0) -> dict[str, Any]:
    """Tune's latest experiment snapshot. While a run goes, Tune copies it into the folder in
    place, so a read can find it empty or cut short: read again until it is whole."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = sorted(exp_dir.glob("experiment_state-*.json"))
        if not states:
            raise ExperimentError(f"{exp_dir}: not an experiment folder (no "
                                  "experiment_state-*.json). Hint: pass <storage>/<name> of an "
                                  "`hpo run`")
        try:
            state: dict[str, Any] = json.loads(states[-1].read_text())
            return state
        except ValueError:
            if time.monotonic() > deadline:
                raise ExperimentError(f"{states[-1]}: not valid JSON for {timeout_s:g} s. Hint: "
                                      "the file is damaged; an older experiment_state-*.json "
                                      "may still be whole") from None
            time.sleep(0.05)


def saved_spec(exp_dir: Path) -> dict[str, Any]:
    """The spec an experiment was started with (written by `hpo run`)."""
    path = exp_dir / SPEC_FILE
    if not path.is_file():
        raise ExperimentError(f"{exp_dir}: no {SPEC_FILE} here. Hint: pass the folder that "
                              "`hpo run` printed (<storage>/<name>)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        data = error
    if not isinstance(data, dict) or "metric" not in data or "mode" not in data:
        raise ExperimentError(f"{path}: damaged, not the spec `hpo run` wrote (a mapping with "
                              f"metric and mode). Hint: put the YAML the run was started with "
                              "in its place")
    return data


def trial_results(trial_dir: Path) -> list[dict[str, Any]]:
    """Every result a trial reported, in order (its result.json; empty before the first)."""
    path = trial_dir / "result.json"
    if not path.is_file():
        return []
    results = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line Tune is writing right now
            results.append(json.loads(line))
    return results


def metrics(result: dict[str, Any]) -> dict[str, Any]:
    """What the trainable reported in one result (nested dicts as `a/b`), without Ray's
    bookkeeping."""
    # Every key flattened from a top-level one starts with it: dropping Ray's keys before the
    # flattening drops what dropping after it would, without flattening each row's config.
    return _flat({key: value for key, value in result.items()
                  if key.split("/", 1)[0] not in BOOKKEEPING})


def objectives(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, mode) of each objective of a saved spec, read as data (Spec.objectives is the
    same for a validated one; importing hpo.spec here would load pydantic for every read)."""
    if isinstance(spec["metric"], str):
        return [(spec["metric"], str(spec["mode"]))]
    return list(zip(spec["metric"], spec["mode"], strict=True))


def _row(trial: dict[str, Any], curve: list[dict[str, Any]], exp_dir: Path,
         goals: list[tuple[str, str]]) -> dict[str, Any]:
    last = curve[-1] if curve else {}
    row = {"trial_id": trial["trial_id"], "status": trial["status"]}
    row.update({f"config/{k}": v for k, v in _flat(trial["config"]).items()})
    for metric, mode in goals:
        values = [r[metric] for r in curve if _is_number(r.get(metric))]
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


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _read(exp_dir: str | Path) -> tuple[Path, dict[str, Any], list[_Trial]]:
    """The folder, its spec and each trial of the latest snapshot with its results."""
    exp_dir = Path(exp_dir).expanduser().resolve()
    if not exp_dir.is_dir():
        raise ExperimentError(f"{exp_dir}: no such folder. Hint: check the path")
    spec = saved_spec(exp_dir)
    trials = [json.loads(pair[0]) for pair in _snapshot(exp_dir)["trial_data"]]
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


def best_config(frame: pd.DataFrame) -> dict[str, Any]:
    """The config of the best trial (first row), nested back as the trainable saw it."""
    import pandas as pd

    if frame.empty or pd.isna(frame.iloc[0][f"best_{frame.attrs['metric']}"]):
        raise ExperimentError(never_a_number(frame) or "no trial reported the metric yet. "
                              "Hint: wait for the first results, or check the trials' "
                              "error.txt files")
    return row_config(frame.iloc[0])


def never_a_number(frame: pd.DataFrame) -> str | None:
    """Where no trial reported the metric as a number but one reported it as something else
    (a str, a bool; a class trainable's or tune.report's, which hpo.report does not see): what."""
    metric = frame.attrs.get("metric", "")
    values = frame.get(metric, [])  # each trial's last value
    found = next((v for v in values if v is not None and not _is_number(v)), None)
    return None if found is None else not_a_number(metric, found)


def kept_best(trial_dir: Path) -> Path | None:
    """A trial's best checkpoint folder (checkpoint.keep_best); None before its first. While a
    better one is put in its place (or when a run was killed right then), the previous one."""
    for name in (BEST_CHECKPOINT, SWAPPED_OUT):
        if (trial_dir / name / BEST_RECORD).is_file():
            return trial_dir / name
    return None


def best_checkpoint(exp_dir: str | Path, frame: pd.DataFrame) -> Path:
    """The best checkpoint folder of the best trial (the first row: best_config's trial)."""
    exp_dir = Path(exp_dir).expanduser().resolve()
    if not (saved_spec(exp_dir).get("checkpoint") or {}).get("keep_best", False):
        raise ExperimentError(f"{exp_dir}: no best checkpoint was kept (checkpoint.keep_best "
                              "was off). Hint: set checkpoint: {keep_best: true} for the next "
                              "run; this run's newest checkpoints are each trial's "
                              "checkpoint_* folders")
    best_config(frame)  # no trial reported the metric yet: that one line
    row = frame.iloc[0]
    found = kept_best(Path(row["path"]))
    if found is None:
        raise ExperimentError(f"{exp_dir}: the best trial {row['trial_id']} has no checkpoint "
                              f"that reported '{frame.attrs['metric']}' yet. Hint: "
                              "hpo.report(metrics, checkpoint=...) keeps one every "
                              "checkpoint.frequency reports; a running trial may not have "
                              "saved its first")
    return found


def front(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows on the Pareto front, best first on the first objective; with one objective,
    the best trial (none before a trial reported the metric)."""
    if "pareto_front" in frame:
        return frame[frame["pareto_front"].astype(bool)]
    if frame.empty:
        return frame
    return frame.head(1).dropna(subset=[f"best_{frame.attrs['metric']}"])


def plain(value: Any) -> Any:
    """A numpy scalar as the Python value (YAML and JSON take only those)."""
    return value.item() if hasattr(value, "item") else value


def row_config(row: pd.Series) -> dict[str, Any]:
    """A row's config/* columns nested back as the trainable saw them."""
    config: dict[str, Any] = {}
    for column, value in row.items():
        if str(column).startswith("config/"):
            *parents, leaf = str(column).removeprefix("config/").split("/")
            node = config
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = plain(value)
    return config
