"""The experiment as an in-memory Optuna study, so Optuna's importance evaluators can be used
as they are (fANOVA, seeded: the same folder gives the same report)."""

from __future__ import annotations

import math
from typing import Any

import optuna
import pandas as pd

from hpo.optuna.space import space_to_optuna, widen
from hpo.reporting.data import Experiment


def as_study(exp: Experiment) -> optuna.Study:
    """One completed Optuna trial per trial that reported the metric (its best value)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    table = exp.table
    columns = {name: f"config/{name}" for name in exp.space()}
    dists = {name: widen(dist, table[columns[name]].map(_plain))
             for name, dist in space_to_optuna(exp.space()).items()
             if columns[name] in table}
    study = optuna.create_study(direction="maximize" if exp.mode == "max" else "minimize")
    for _, row in table.iterrows():
        value = row[f"best_{exp.metric}"]
        if pd.isna(value) or not math.isfinite(value):
            continue
        params = {name: _plain(row[columns[name]]) for name in dists}
        study.add_trial(optuna.trial.create_trial(
            value=float(value), params=params, distributions=dists,
            user_attrs={"trial_id": row["trial_id"]}))
    return study


def _plain(value: Any) -> Any:
    """numpy scalars as Python values (Optuna's categorical choices compare by type)."""
    return value.item() if hasattr(value, "item") else value


def importances(study: optuna.Study) -> dict[str, float] | str:
    """fANOVA importance of each hyperparameter, or why it cannot be computed."""
    done = len(study.get_trials(deepcopy=False))
    params = {p for t in study.get_trials(deepcopy=False) for p in t.params}
    if done < 2 or not params:
        return (f"needs at least 2 trials with results and 1 searched hyperparameter "
                f"(have {done} and {len(params)})")
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    try:
        return optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        return f"Optuna could not compute it: {exc}"
