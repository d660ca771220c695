"""search.warm_start: an earlier experiment's finished trials, fed to Optuna before the first
new trial, so TPE starts from what is known instead of from random startup trials."""

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

Evaluated = list[tuple[dict[str, Any], float]]


class WarmOptunaSearch(OptunaSearch):
    """OptunaSearch that adds finished trials to its study once Tune has given it the space.
    On resume the saved study (which has them) replaces the new one: nothing is added twice."""

    def __init__(self, *args: Any, evaluated: Evaluated, **kwargs: Any) -> None:
        self._evaluated = evaluated
        super().__init__(*args, **kwargs)

    def _setup_study(self, mode: Any) -> None:
        super()._setup_study(mode)
        for config, value in self._evaluated:
            self.add_evaluated_point(config, value)


def earlier_trials(spec: Spec) -> Evaluated:
    """(config, final objective) of each finished trial of spec.search.warm_start that fits the
    current search space; the others are skipped with a warning naming them."""
    folder = Path(str(spec.search.warm_start)).expanduser().resolve()
    frame = load_results(folder)
    found: Evaluated = []
    finished = frame[frame["status"] == "TERMINATED"] if len(frame) else frame
    for _, row in finished.iterrows():
        config, value = _config(row, spec), _final(Path(row["path"]), spec.metric)
        why = _misfit(config, spec) if value is not None else f"no {spec.metric} reported"
        if why:
            log.warning("warning: warm start: skipped trial %s: %s", row["trial_id"], why)
        else:
            found.append((config, value))  # type: ignore[arg-type]
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


def _final(trial_dir: Path, metric: str) -> float | None:
    """The objective Optuna would have been told: the metric's last reported value."""
    values = [r[metric] for r in trial_results(trial_dir)
              if isinstance(r.get(metric), (int, float))]
    return float(values[-1]) if values else None


def _misfit(config: dict[str, Any], spec: Spec) -> str | None:
    # Optuna's add_trial raises on a value outside its distributions: filter first.
    for name, dist in spec.search_space.items():
        if name not in config:
            return f"{name} is not in its config"
        why = dist.misfit(config[name])
        if why:
            return f"{name}: {why}"
    return None
