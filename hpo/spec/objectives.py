"""`metric:` and `mode:`: one objective, or several (a Pareto front, searched by Optuna).

A list of metrics goes to Optuna's multi-objective samplers only: Tune's schedulers and its
own best-trial logic take one metric, and pruning on one of several objectives would cut
trials that are on the front.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hpo.spec._validation import FieldProblem

MODES = ("max", "min")


def check_metric(value: Any) -> Any:
    """A metric name, or a list of at least two distinct names."""
    several = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if not (isinstance(value, str) or several):
        raise FieldProblem("", f"expected a metric name or a list of them (got {value!r})",
                           "e.g. metric: val_accuracy, or metric: [val_accuracy, "
                           "time_total_s] with mode: [max, min]")
    if several and len(value) < 2:
        raise FieldProblem("", f"a list needs at least 2 metrics (got {value!r})",
                           "write one objective as text, e.g. metric: val_accuracy")
    if several and len(set(value)) < len(value):
        raise FieldProblem("", f"a metric appears twice (got {value!r})",
                           "name each objective once")
    return value


def check_mode(value: Any) -> Any:
    """'max' or 'min', or a list of them (the path of a bad item is its index)."""
    for index, word in enumerate(value if isinstance(value, list) else [value]):
        if not isinstance(word, str) or word not in MODES:
            raise FieldProblem(str(index) if isinstance(value, list) else "",
                               f"must be 'max' or 'min' (got {word!r})",
                               "max for scores such as accuracy, min for losses and costs")
    return value


def check_objectives(metric: str | list[str], mode: str | Sequence[str], search_type: str,
                     scheduler_type: str) -> None:
    """One mode per metric; several only with the Optuna searcher and the fifo scheduler."""
    if isinstance(metric, str) and isinstance(mode, str):
        return
    if isinstance(metric, str) or isinstance(mode, str):
        what = (f"a list of modes ({mode!r}) for one metric" if isinstance(metric, str)
                else f"one mode ({mode!r}) for {len(metric)} metrics")
        raise FieldProblem("mode", what, "give one mode per metric: "
                           "mode: max with one metric, mode: [max, min] with two")
    if len(mode) != len(metric):
        raise FieldProblem("mode", f"{len(mode)} modes for {len(metric)} metrics (got "
                           f"{mode!r})", "give one mode per metric, in the same order")
    if search_type != "optuna":
        raise FieldProblem("search.type", f"several metrics need search.type optuna (got "
                           f"{search_type})", "Optuna's samplers (TPE, NSGA-II) search for "
                           "a Pareto front: use search.type: optuna")
    if scheduler_type != "fifo":
        raise FieldProblem("scheduler.type", f"{scheduler_type} cannot stop trials early on "
                           "several metrics", "use scheduler.type: fifo (every trial runs to "
                           "its end), or a single metric")


def pairs(metric: str | list[str], mode: str | Sequence[str]) -> list[tuple[str, str]]:
    """(metric, mode) of each objective, from the spec or its saved YAML data."""
    if isinstance(metric, str):
        return [(metric, str(mode))]
    return list(zip(metric, mode, strict=True))
