"""An experiment folder's files, read without Ray: the saved spec, Tune's latest snapshot,
each trial's results, and the names of what hpo writes there."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import yaml

from hpo.errors import ExperimentError

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


BEST_CHECKPOINT = "best_checkpoint"  # <trial>/best_checkpoint: checkpoint.keep_best's copy


BEST_RECORD = "hpo_best.json"  # in it: metric, mode, score and training_iteration


SWAPPED_OUT = ".best_checkpoint.old"  # the previous best, while a better one is put in place


def snapshot(exp_dir: Path, timeout_s: float = 5.0) -> dict[str, Any]:
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
    return flat({key: value for key, value in result.items()
                  if key.split("/", 1)[0] not in BOOKKEEPING})


def objectives(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, mode) of each objective of a saved spec, read as data (Spec.objectives is the
    same for a validated one; importing hpo.spec here would load pydantic for every read)."""
    if isinstance(spec["metric"], str):
        return [(spec["metric"], str(spec["mode"]))]
    return list(zip(spec["metric"], spec["mode"], strict=True))


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out
