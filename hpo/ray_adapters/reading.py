"""How the adapters read and change Ray: a class by its path, whether Ray's code sets an
attribute, a method's parameters, a config key's name, and a change for the length of a block.
Every adapter's check (`missing()`) and patch is built from these."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any


def ray_class(path: str) -> type:
    """A Ray class by its module.Class path."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def sets_or_defines(cls: type, name: str) -> bool:
    """Whether a class's own code (its MRO's, not hpo's) defines `name` or assigns self.name."""
    # also `self.x: T = ...`, the annotation over a few lines
    assigned = re.compile(rf"self\.{name}\s*(?::[^=\n]*(?:\n[^=\n]*){{0,3}})?=[^=]")
    return any(name in vars(base) or assigned.search(source_of(base))
               for base in cls.__mro__ if base.__module__.split(".")[0] == "ray")


def source_of(cls: type) -> str:
    """A class's source (empty where it has none)."""
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return ""


@contextlib.contextmanager
def replaced(owner: Any, name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    """While the block runs, owner.name is wrap(the original); the original after."""
    original = getattr(owner, name)
    setattr(owner, name, wrap(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def command_prefixed(arg: str, flag: str, prefix: list[str]) -> str:
    """A raylet argument `flag`<command> (services.start_raylet's agent commands, a
    list2cmdline) with `prefix` run before that command; any other argument as it is."""
    if not arg.startswith(flag):
        return arg
    return flag + subprocess.list2cmdline(prefix) + " " + arg[len(flag):]


def unknown_config_keys(keys: Iterable[str]) -> list[str]:
    """Those of these `_system_config` keys that the installed Ray's library does not name
    (an unknown key fails the node's start). Ray's config names are NUL-ended strings in
    _raylet.so; a string of another use may match too, so this only catches a name gone from
    Ray: the tests that start a node with these keys are the real check."""
    import ray._raylet

    names = Path(ray._raylet.__file__).read_bytes()
    return [key for key in keys if key.encode() + b"\0" not in names]


def method_params(cls: type, name: str) -> list[str]:
    method = inspect.getattr_static(cls, name, None)
    return list(inspect.signature(method).parameters) if inspect.isfunction(method) else []
