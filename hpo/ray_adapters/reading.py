"""How the adapters read and change Ray: a class or function's source text, whether Ray's
code sets an attribute, a method's parameters, a config key's name in Ray's library, and a
change for the length of a block. Every adapter's check (`missing()`) and patch is built from these.

Ray's files as the adapters' checks read them: its source text (each file read once a
process, each class's or function's block cut out of its lines by their indentation) and the
config names in its library.

`inspect.getsource` parses a class's whole module again at every call and tokenizes the
class's body (TuneController's is some 2,000 lines); the gate reads some 70 of them, which
cost seconds at every start. `source(obj)` gives the same text from the lines alone: a
function starts at its code's first line, a class at its `class` line (decorators above
included), and the block ends before the first line indented no deeper than its start. Where
that cannot be placed (a lambda, a module, an object built at run time) the text comes from
inspect.getsource. Triple-quoted strings are followed; another string continued at a
shallower indentation would end a block early: a check then finds a gap and its patch is
off, not wrongly on.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import linecache
import mmap
import re
import subprocess
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_TRIPLE = re.compile(r'"""|\'\'\'')


def source(obj: Any) -> str:
    """The source text of a class, function or method, as inspect.getsource gives it (its
    errors too: OSError where there is none, TypeError for a built-in)."""
    return _source(inspect.unwrap(getattr(obj, "__func__", obj)))


@functools.cache
def _source(obj: Any) -> str:
    filename = inspect.getsourcefile(obj)
    lines = linecache.getlines(filename) if filename else []
    first = _first_line(obj, lines) if lines else None
    if first is None:
        return inspect.getsource(obj)
    return "".join(lines[first:_block_end(lines, first)])


def _first_line(obj: Any, lines: list[str]) -> int | None:
    """The index of the object's first line (its first decorator's), or None."""
    if inspect.isclass(obj):
        return _class_line(obj.__qualname__, lines)
    code = getattr(obj, "__code__", None)
    if code is None or code.co_name == "<lambda>" or code.co_firstlineno > len(lines):
        return None
    first = code.co_firstlineno - 1
    header = lines[first].lstrip()
    return first if header.startswith(("def ", "async def ", "@")) else None


def _class_line(qualname: str, lines: list[str]) -> int | None:
    """The first line of the class of this qualified name (the first in the file, as
    inspect takes it), nested classes looked for inside their outer class's block."""
    start, end, line = 0, len(lines), None
    for name in qualname.split("."):
        shape = re.compile(rf"\s*class\s+{re.escape(name)}\b")
        line = next((i for i in range(start, end) if shape.match(lines[i])), None)
        if line is None:
            return None
        start, end = line + 1, _block_end(lines, line)
    indent = _indent(lines[line])  # type: ignore[index]
    while line and lines[line - 1].lstrip().startswith("@") and \
            _indent(lines[line - 1]) == indent:
        line -= 1
    return line


def _block_end(lines: list[str], first: int) -> int:
    """The index past the last line of the block whose header (decorators included) starts at
    `first`: past its header (brackets closed, a colon ending it), the lines indented deeper,
    trailing blank lines and comments left out."""
    indent, header = _indent(lines[first]), first
    depth = 0
    for header in range(first, len(lines)):
        code = lines[header].split("#")[0].rstrip()
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if depth <= 0 and ":" in code and not code.lstrip().startswith("@"):
            break
    if not lines[header].split("#")[0].rstrip().endswith(":"):
        return header + 1  # a block on its header's line: `def f(): return 1`
    last, quote = header, ""
    for i in range(header + 1, len(lines)):
        stripped = lines[i].strip()
        if not quote and (not stripped or stripped.startswith("#")):
            continue
        if not quote and _indent(lines[i]) <= indent:
            break
        last, quote = i, _open_quote(lines[i], quote)
    return last + 1


def _open_quote(line: str, quote: str) -> str:
    """The triple quote still open after this line ("" for none), given the one open before
    it: a docstring's line at any indentation is inside the block."""
    for found in _TRIPLE.findall(line):
        if not quote:
            quote = found
        elif found == quote:
            quote = ""
    return quote


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def class_text(module: str, qualname: str) -> str:
    """A class's source read from its module's file without importing the module ("" where
    the file or the class is not found)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return ""
    lines = linecache.getlines(spec.origin) if spec and spec.origin else []
    first = _class_line(qualname, lines) if lines else None
    return "" if first is None else "".join(lines[first:_block_end(lines, first)])


def unknown_config_keys(keys: Iterable[str]) -> list[str]:
    """Those of these `_system_config` keys that the installed Ray's library does not name
    (an unknown key fails the node's start). Ray's config names are NUL-ended strings in
    _raylet.so; a string of another use may match too, so this only catches a name gone from
    Ray: the tests that start a node with these keys are the real check. Ray's names lie
    together: each is looked for near the last one found first (the file is 40 MB)."""
    names, unknown, near = _raylet_library(), [], -1
    for key in keys:
        wanted = key.encode() + b"\0"
        at = names.find(wanted, max(0, near - _NEAR), near + _NEAR) if near >= 0 else -1
        at = names.find(wanted) if at < 0 else at
        if at < 0:
            unknown.append(key)
        near = at if at >= 0 else near
    return unknown


_NEAR = 1 << 20


@functools.cache
def _raylet_library() -> mmap.mmap:
    import ray._raylet

    with open(ray._raylet.__file__, "rb") as library:
        return mmap.mmap(library.fileno(), 0, access=mmap.ACCESS_READ)


def ray_class(path: str) -> type:
    """A Ray class by its module.Class path."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


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


def method_params(cls: type, name: str) -> list[str]:
    method = inspect.getattr_static(cls, name, None)
    return list(inspect.signature(method).parameters) if inspect.isfunction(method) else []


def sets_or_defines(cls: type, name: str) -> bool:
    """Whether a class's own code (its MRO's, not hpo's) defines `name` or assigns self.name."""
    return any(name in vars(base) or assigns(source_of(base), name)
               for base in cls.__mro__ if base.__module__.split(".")[0] == "ray")


def assigns(text: str, name: str) -> bool:
    """Whether code text assigns self.name (also `self.x: T = ...`, over a few lines)."""
    return re.search(rf"self\.{name}\s*(?::[^=\n]*(?:\n[^=\n]*){{0,3}})?=[^=]", text) is not None


def source_of(cls: type) -> str:
    """A class's source (empty where it has none)."""
    try:
        return source(cls)
    except (OSError, TypeError):
        return ""
