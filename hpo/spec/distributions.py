"""Search-space distributions written as `{kind: [args]}` and their Ray Tune domains."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from hpo.spec._validation import FieldProblem, did_you_mean


@dataclass(frozen=True)
class _Kind:
    arity: int  # number of numeric arguments; 0 means "a list of values"
    integer: bool = False  # low/high must be integers
    positive: bool = False  # low must be > 0 (log scales)
    ranged: bool = True  # first two args are low < high (False for randn: mean, sd)


KINDS: dict[str, _Kind] = {
    "uniform": _Kind(2),
    "quniform": _Kind(3),
    "loguniform": _Kind(2, positive=True),
    "qloguniform": _Kind(3, positive=True),
    "randint": _Kind(2, integer=True),
    "qrandint": _Kind(3, integer=True),
    "lograndint": _Kind(2, integer=True, positive=True),
    "qlograndint": _Kind(3, integer=True, positive=True),
    "randn": _Kind(2, ranged=False),
    "qrandn": _Kind(3, ranged=False),
    "choice": _Kind(0),
    "grid": _Kind(0),
}
_EXAMPLE = "write e.g. {loguniform: [1.0e-4, 1.0e-1]} or {choice: [32, 64]}"


def _numbers(kind: str, spec: _Kind, args: Any) -> tuple[float, ...]:
    if not isinstance(args, list) or len(args) != spec.arity:
        raise FieldProblem(kind, f"takes a list of {spec.arity} numbers, got {args!r}", _EXAMPLE)
    for arg in args:
        if isinstance(arg, bool) or not isinstance(arg, (int, float)):
            raise FieldProblem(kind, f"expected numbers, got {arg!r}", "write plain numbers")
        if not math.isfinite(arg):  # Ray's samplers fail on them after the run has started
            raise FieldProblem(kind, f"expected finite numbers, got {arg!r}",
                               "give the range finite bounds, e.g. [1.0e-4, 1.0e+2]")
        if spec.integer and arg != int(arg):
            raise FieldProblem(kind, f"expects integers, got {arg!r}", "use uniform for floats")
    if spec.ranged and not args[0] < args[1]:
        raise FieldProblem(kind, f"low must be < high (got {args[0]} >= {args[1]})", "swap them")
    if spec.positive and args[0] <= 0:
        raise FieldProblem(kind, f"needs low > 0 on a log scale (got {args[0]})", "use uniform")
    if not spec.ranged and args[1] <= 0:
        raise FieldProblem(kind, f"needs sd > 0 (got {args[1]})", "write [mean, sd]")
    if spec.arity == 3 and args[2] <= 0:
        raise FieldProblem(kind, f"needs q > 0 (got {args[2]})", "q is the rounding step")
    return tuple(int(a) if spec.integer else float(a) for a in args)


class Distribution(BaseModel):
    """One searchable hyperparameter, e.g. `{loguniform: [1e-4, 1e-1]}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str
    args: tuple[Any, ...]

    @model_validator(mode="before")
    @classmethod
    def _from_yaml(cls, data: Any) -> Any:
        if isinstance(data, dict) and set(data) == {"kind", "args"}:
            return data  # already parsed (model_copy / model_validate of a dump)
        if not isinstance(data, dict) or len(data) != 1:
            raise FieldProblem("", f"expected one {{kind: [args]}} entry, got {data!r}", _EXAMPLE)
        (kind, args), = data.items()
        spec = KINDS.get(kind)
        if spec is None:
            raise FieldProblem(str(kind), f"unknown distribution '{kind}'",
                               did_you_mean(str(kind), list(KINDS)))
        if spec.arity:
            return {"kind": kind, "args": _numbers(kind, spec, args)}
        if not isinstance(args, list) or not args:
            raise FieldProblem(kind, f"takes a non-empty list of values, got {args!r}",
                               f"write {{{kind}: [a, b, c]}}")
        return {"kind": kind, "args": tuple(args)}

    @property
    def bounds(self) -> tuple[float, float] | None:
        """(low, high) of a ranged numeric distribution, else None."""
        spec = KINDS[self.kind]
        return (self.args[0], self.args[1]) if spec.arity and spec.ranged else None

    def misfit(self, value: Any) -> str | None:
        """Why `value` cannot be a sample of this distribution (None if it can), e.g.
        `5 is outside loguniform [0.0001, 0.1]`: a warm-start point must be one."""
        spec, shown = KINDS[self.kind], f"{self.kind} [{', '.join(map(_short, self.args))}]"
        if not spec.arity:
            return None if value in self.args else f"{_short(value)} is not one of {shown}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{value!r} is not a number ({shown})"
        if spec.integer and value != int(value):
            return f"{_short(value)} is not a whole number ({shown})"
        if not spec.ranged:
            return None
        # Ray draws randint/lograndint below high; the q-variants and floats reach it.
        below_high = value < self.args[1] if self.kind in ("randint", "lograndint") else (
            value <= self.args[1])
        if self.args[0] <= value and below_high:
            return None
        return f"{_short(value)} is outside {shown}"

    def to_tune(self) -> Any:
        """The Ray Tune domain (or grid_search dict) for this distribution."""
        from ray import tune

        if self.kind == "grid":
            return tune.grid_search(list(self.args))
        if self.kind == "choice":
            return tune.choice(list(self.args))
        return getattr(tune, self.kind)(*self.args)


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value) if isinstance(
        value, str) else str(value)
