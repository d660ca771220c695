"""The experiment as an in-memory Optuna study, so Optuna's importance evaluators can be used
as they are (fANOVA, seeded: the same folder gives the same report)."""

from __future__ import annotations

import math
import random
from typing import Any

import optuna
import pandas as pd
from optuna.distributions import FloatDistribution, IntDistribution

from hpo.optuna.space import space_to_optuna, widen
from hpo.reporting.data import Experiment

IMPORTANCE_MAX = 500


def as_study(exp: Experiment) -> optuna.Study:
    """One completed Optuna trial per trial that reported the metric (its best value)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    table = exp.table
    columns = {name: f"config/{name}" for name in exp.space()}
    dists = {name: widen(dist, table[columns[name]].map(_plain))
             for name, dist in space_to_optuna(exp.space()).items()
             if columns[name] in table}
    study = optuna.create_study(direction="maximize" if exp.mode == "max" else "minimize")
    rows = zip(table["trial_id"], table[f"best_{exp.metric}"],
               *(table[columns[name]] for name in dists), strict=True)
    trials = [optuna.trial.create_trial(
        value=float(value), params={n: _plain(v) for n, v in zip(dists, values, strict=True)},
        distributions=dists, user_attrs={"trial_id": trial_id})
        for trial_id, value, *values in rows if not pd.isna(value) and math.isfinite(value)]
    study.add_trials(trials)  # at once: a row loop with add_trial took seconds at 10,000
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
        return optuna.importance.get_param_importances(_in_log_space(_sample(study)),
                                                       evaluator=evaluator)
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        return f"Optuna could not compute it: {exc}"


def _in_log_space(study: optuna.Study) -> optuna.Study:
    """The trials with log-distributed hyperparameters as their logarithms: Optuna's fANOVA
    splits on raw values, so a loguniform learning rate would look flat over its decades."""
    trials = study.get_trials(deepcopy=False)
    logs = {n for t in trials for n, d in t.distributions.items()
            if isinstance(d, (FloatDistribution, IntDistribution)) and d.log}
    if not logs:
        return study
    moved = optuna.create_study(directions=study.directions)
    moved.add_trials([optuna.trial.create_trial(
        values=t.values, user_attrs=t.user_attrs,
        params={n: math.log(v) if n in logs else v for n, v in t.params.items()},
        distributions={n: _log_axis(d) if n in logs else d
                       for n, d in t.distributions.items()}) for t in trials])
    return moved


def _log_axis(dist: Any) -> FloatDistribution:
    return FloatDistribution(math.log(dist.low), math.log(dist.high))


def _sample(study: optuna.Study) -> optuna.Study:
    """At most IMPORTANCE_MAX trials, a seeded random sample beyond that: fANOVA's forest
    grows faster than the trial count (55 s of a 3,000-trial report), while its scores
    settle within a few hundred trials."""
    trials = study.get_trials(deepcopy=False)
    if len(trials) <= IMPORTANCE_MAX:
        return study
    picked = random.Random(0).sample(trials, IMPORTANCE_MAX)
    smaller = optuna.create_study(directions=study.directions)
    smaller.add_trials(picked)
    return smaller
