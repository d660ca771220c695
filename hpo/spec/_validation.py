"""Strict pydantic base models and the translation of their errors into one-line messages.

Every model rejects unknown keys itself (with a did-you-mean), and validators raise
`FieldProblem` to point at a field and carry a hint, so `config_error` can always name the
dotted YAML path, the bad value and what to do instead.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticSerializationError, to_jsonable_python

from hpo.errors import ConfigError

# Names of discriminated-union tags pydantic inserts into error locations (scheduler/search
# types); they are not YAML keys, so they are dropped from the dotted path.
_TAG_PARENTS = ("scheduler", "search")


class FieldProblem(ValueError):
    """A validator's complaint about one field (relative to the model), with a hint."""

    def __init__(self, field: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.field, self.message, self.hint = field, message, hint


def did_you_mean(word: str, choices: list[str]) -> str:
    """A hint naming the closest valid choice (if any) and all of them."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    listing = ", ".join(choices)
    return f"did you mean '{close[0]}'? Valid: {listing}" if close else f"valid: {listing}"


class Strict(BaseModel):
    """Immutable model that rejects unknown keys by name, suggesting the closest one."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    #: Keys accepted besides the fields (e.g. the `type:` tag handled by a registry).
    extra_keys: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise FieldProblem("", f"expected a mapping, got {data!r}", "write key: value pairs")
        known = [*cls.model_fields, *cls.extra_keys]
        for key in data:
            if key not in known:
                raise FieldProblem(str(key), f"unknown key '{key}'", did_you_mean(str(key), known))
        return data


_HINTS = {
    "literal_error": "choose one of the values listed",
    "int_parsing": "write a whole number",
    "int_from_float": "write a whole number",
    "float_parsing": "write a number, e.g. 0.01 or 1e-4",
    "bool_parsing": "write true or false",
    "string_type": "write text (quote it if YAML reads it as something else)",
    "dict_type": "write key: value pairs",
    "model_attributes_type": "write key: value pairs, e.g. {type: asha}",
    "greater_than": "use a value in the allowed range",
    "greater_than_equal": "use a value in the allowed range",
    "less_than": "use a value in the allowed range",
    "less_than_equal": "use a value in the allowed range",
    "list_type": "write a list, e.g. [1, 2]",
    "tuple_type": "write a list, e.g. [1, 2]",
}


def _dotted(loc: tuple[Any, ...], *extra: str) -> str:
    parts = [str(p) for p in loc]
    if len(parts) > 1 and parts[0] in _TAG_PARENTS:
        del parts[1]  # the union tag, e.g. ('scheduler', 'asha', 'max_t')
    return ".".join(p for p in (*parts, *extra) if p)


def _describe(err: Mapping[str, Any]) -> tuple[str, str, str]:
    """(path, message, hint) for one pydantic error dict."""
    loc, kind, value = tuple(err["loc"]), err["type"], err.get("input")
    problem = err.get("ctx", {}).get("error")
    if isinstance(problem, FieldProblem):
        return _dotted(loc, problem.field), problem.message, problem.hint
    if kind == "missing":
        where = " (from Python: or hpo.run(spec, trainable=train))" if loc == ("trainable",) \
            else ""
        return _dotted(loc), "missing required key", f"add it to the YAML{where}"
    if kind == "union_tag_invalid":
        tags = [t.strip(" '") for t in err["ctx"]["expected_tags"].split(",")]
        tag = err["ctx"]["tag"]
        return _dotted(loc, "type"), f"unknown type '{tag}'", did_you_mean(tag, tags)
    if kind == "union_tag_not_found":
        return _dotted(loc, "type"), "missing required key", "name the type, e.g. type: asha"
    message = err["msg"].removeprefix("Value error, ")
    message = message[0].lower() + message[1:]
    got = repr(value)
    message += f" (got {got if len(got) <= 60 else got[:57] + '...'})"
    return _dotted(loc), message, _HINTS.get(kind, "")


def config_error(source: str, exc: ValidationError) -> ConfigError:
    """Turn pydantic's ValidationError into one ConfigError naming the first problem."""
    errors = exc.errors()
    path, message, hint = _describe(errors[0])
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem(s) after this one)"
    return ConfigError(source, path, message, hint)


def unwritable(value: Any) -> str | None:
    """The type of the first part of `value` (a key or a value, at any depth) that the
    experiment's YAML cannot hold (a NumPy array, a DataFrame, a model), as module.name; None
    where all of it can."""
    try:
        to_jsonable_python(value)
        return None
    except (PydanticSerializationError, ValueError):
        pass
    own = f"{type(value).__module__}.{type(value).__qualname__}"
    if isinstance(value, dict):
        parts: Any = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        parts = value
    else:
        return own
    return next((kind for part in parts if (kind := unwritable(part))), own)
