"""search.warm_start: an earlier experiment's finished trials, fed to Optuna before the first
new trial, so TPE starts from what is known instead of from random startup trials. With
several objectives each trial brings a value per objective (Optuna's study.add_trial: Ray's
add_evaluated_point takes one value)."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from ray.tune.search.optuna import OptunaSearch

from hpo.results import load_results, trial_results
from hpo.spec.model import Spec

# No logging is configured below the CLI: Python's last-resort handler prints WARNING and up
# on stderr as the bare message, which is the one line `hpo run` shows (like hpo.lease's).
log = logging.getLogger("hpo.warm_start")

Evaluated = list[tuple[dict[str, Any], list[float]]]  # config, a value per objective


class WarmOptunaSearch(OptunaSearch):
    """OptunaSearch that adds finished trials to its study once Tune has given it the space.
    On resume the saved study (which has them) replaces the new one: nothing is added twice."""

    def __init__(self, *args: Any, evaluated: Evaluated, **kwargs: Any) -> None:
        self._evaluated = evaluated
        super().__init__(*args, **kwargs)

    # Ray's private hook: listed and checked in hpo.ray_adapters.tune_guards.OVERRIDDEN_HOOKS.
    def _setup_study(self, mode: Any) -> None:
        from optuna.trial import create_trial

        super()._setup_study(mode)
        self._ot_study.add_trials([create_trial(values=values, params=config,
                                                distributions=self._space)
                                   for config, values in self._evaluated])


def earlier_trials(spec: Spec) -> Evaluated:
    """(config, final objective values) of each finished trial of spec.search.warm_start that
    fits the current search space; the others are skipped with a warning naming them."""
    folder = Path(str(spec.search.warm_start)).expanduser().resolve()
    frame = load_results(folder)
    found: Evaluated = []
    finished = frame[frame["status"] == "TERMINATED"] if len(frame) else frame
    for _, row in finished.iterrows():
        config, values = _config(row, spec), _finals(Path(row["path"]), spec)
        why = _misfit(config, spec) if isinstance(values, list) else values
        if why:
            log.warning("warning: warm start: skipped trial %s: %s", row["trial_id"], why)
        else:
            found.append((config, values))  # type: ignore[arg-type]  # a list: no why
    log.warning("warm start: %d trials from %s", len(found), folder)
    return found


def _config(row: Any, spec: Spec) -> dict[str, Any]:
    config = {}
    for name in spec.search_space:
        value = row.get(f"config/{name}")
        value = value.item() if hasattr(value, "item") else value
        if not (value is None or (isinstance(value, float) and math.isnan(value))):
            config[name] = value
    return config


def _finals(trial_dir: Path, spec: Spec) -> list[float] | str:
    """What Optuna would have been told: each objective's last reported value, or why not."""
    results = trial_results(trial_dir)
    finals = []
    for metric, _ in spec.objectives:
        values = [r[metric] for r in results if isinstance(r.get(metric), (int, float))
                  and math.isfinite(r[metric])]  # Optuna refuses NaN
        if not values:
            return f"no {metric} reported"
        finals.append(float(values[-1]))
    return finals


def _misfit(config: dict[str, Any], spec: Spec) -> str | None:
    # Optuna's add_trial raises on a value outside its distributions: filter first.
    for name, dist in spec.search_space.items():
        if name not in config:
            return f"{name} is not in its config"
        why = dist.misfit(config[name])
        if why:
            return f"{name}: {why}"
    return None
