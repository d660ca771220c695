"""hpo's YAML dialect: numbers as people write them, no duplicate keys, --set overrides."""

from __future__ import annotations

import re
from typing import Any

import yaml

from hpo.errors import ConfigError


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads `1e-4` as a float (YAML 1.2) and rejects duplicate keys."""

    source = "<yaml>"

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise ConfigError(self.source, f"line {key_node.start_mark.line + 1}",
                                  f"a key must be text, got {key!r}", "write name: value")
            if key in seen:
                raise ConfigError(self.source, f"line {key_node.start_mark.line + 1}",
                                  f"duplicate key '{key}'", "keep one of them")
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


# PyYAML (YAML 1.1) needs a dot in a float; YAML 1.2 and people do not: `1e-4` is a number.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text with hpo's loader; syntax errors become one-line ConfigErrors."""
    try:
        return yaml.load(text, Loader=_loader_for(source))  # noqa: S506 - a SafeLoader
    except yaml.MarkedYAMLError as exc:
        # An unclosed quote or bracket is reported where it opened (context), not at EOF.
        mark = exc.context_mark or exc.problem_mark
        what = exc.context if exc.context_mark else exc.problem
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(source, where, f"invalid YAML: {what} (in {_excerpt(text, mark)!r})",
                          "check indentation, quotes and brackets") from None


def _excerpt(text: str, mark: Any) -> str:
    lines = text.splitlines() or [""]
    return lines[min(mark.line, len(lines) - 1)].strip()[:60] if mark else text[:60]


def _loader_for(source: str) -> type[_Loader]:
    return type("_NamedLoader", (_Loader,), {"source": source})


def apply_overrides(data: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    """Apply `dotted.key=yaml-value` overrides (from --set) to the raw mapping."""
    for item in overrides:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise ConfigError(source, "--set", f"expected KEY=VALUE, got {item!r}",
                              "e.g. --set num_samples=4 --set scheduler.max_t=10")
        *parents, leaf = path.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(source, path, f"cannot set a key inside '{part}', which is "
                                  f"{node!r}", "set the whole value, e.g. --set KEY='{a: 1}'")
        node[leaf] = parse_yaml(raw, f"{source} --set {path}")
    return data
