"""hpo's search-space distributions as Optuna distributions, and trials as Optuna trials.

Used by the Optuna mirror (live, during a run) and by the report (an in-memory study that
Optuna's importance evaluators and plots read). Ray's own converter raises on grid search and
logs warnings for quantized domains, so the small mapping lives here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from hpo.spec.distributions import Distribution

_CATEGORY_TYPES = (type(None), bool, int, float, str)


def to_optuna(dist: Distribution) -> BaseDistribution | None:
    """The Optuna distribution of one hpo distribution; None where Optuna has none (randn)."""
    kind, args = dist.kind, dist.args
    if kind in ("choice", "grid"):
        usable = all(isinstance(a, _CATEGORY_TYPES) for a in args)
        return CategoricalDistribution(list(args)) if usable else None
    if kind in ("randn", "qrandn"):
        return None  # unbounded: Optuna distributions need low and high
    log = "log" in kind
    if kind.endswith("randint"):
        # Ray's randint/lograndint exclude high; the quantized ones include it.
        high = args[1] if kind.startswith("q") else args[1] - 1
        return IntDistribution(int(args[0]), int(high), log=log)
    return FloatDistribution(float(args[0]), float(args[1]), log=log)


def space_to_optuna(space: Mapping[str, Distribution]) -> dict[str, BaseDistribution]:
    """Optuna distributions of every search-space entry that has one."""
    converted = {name: to_optuna(dist) for name, dist in space.items()}
    return {name: dist for name, dist in converted.items() if dist is not None}


def split_params(config: Mapping[str, Any], space: Mapping[str, BaseDistribution]
                 ) -> tuple[dict[str, Any], dict[str, BaseDistribution]]:
    """The config values that fit their distribution (Optuna params) and those distributions.

    PBT perturbs values beyond the declared range; those stay out of the params (the caller
    keeps the whole config as a user attribute) rather than failing Optuna's validation.
    """
    params, dists = {}, {}
    for name, dist in space.items():
        value = config.get(name)
        if _fits(dist, value):
            params[name], dists[name] = value, dist
    return params, dists


def _fits(dist: BaseDistribution, value: Any) -> bool:
    try:
        return bool(dist._contains(dist.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False


def widen(dist: BaseDistribution, values: Iterable[Any]) -> BaseDistribution:
    """`dist` grown to hold every observed value (PBT moves values past the declared range)."""
    values = [v for v in values if v is not None]
    if isinstance(dist, CategoricalDistribution):
        extra = [v for v in dict.fromkeys(values) if v not in dist.choices]
        return CategoricalDistribution([*dist.choices, *extra]) if extra else dist
    numbers = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not numbers or all(_fits(dist, v) for v in numbers):
        return dist
    low, high = min(dist.low, *numbers), max(dist.high, *numbers)
    log = dist.log
    if isinstance(dist, IntDistribution):
        return IntDistribution(int(low), int(high), log=log)
    return FloatDistribution(float(low), float(high), log=log)
