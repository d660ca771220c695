"""Work every fresh worker repeats before its first step that the fork server does once, for
all its forks (hpo.ray_adapters.fast_start.fork_server_process): a forked worker's own CPU to its
first step went from 48 to 39 ms (medians of six interleaved pairs, docs/benchmarks.md).

  - the worker's main script (Ray's default_worker.py), which `runpy.run_path` compiles
    from source in each worker (2 ms): compiled once, run as run_path runs it;
  - the regular expressions Ray's worker compiles to find its accelerator IDs (nine, one per
    accelerator kind: 4-5 ms), read from Ray 2.60.0: ray.runtime_context.RuntimeContext.
    get_accelerator_ids matches each of its resources with
    f"^{name}_group_[0-9A-Za-z]+$" for every name in
    ray._private.accelerators.get_all_accelerator_resource_names(), through `re.match`,
    whose cache a fork inherits. tests/driver/test_ray_private.py checks that shape (missing()).
"""

from __future__ import annotations

import re
import runpy
import sys
import types

_ACCELERATOR_PATTERN = "^{}_group_[0-9A-Za-z]+$"
_compiled: dict[str, types.CodeType] = {}  # a script's path -> its code


def prepare() -> None:
    """In the server, once Ray is imported: compile Ray's worker script (by its module's
    path: the one the raylet gives each worker) and the regular expressions every worker
    would compile."""
    from ray._private.workers import default_worker

    prepare_script(default_worker.__file__)
    _warm_accelerator_patterns()


def prepare_script(path: str) -> None:
    """Compile a worker's main script as runpy would: with none of this module's
    `__future__` flags (dont_inherit)."""
    with open(path, "rb") as source:
        _compiled[path] = compile(source.read(), path, "exec", dont_inherit=True)


def _warm_accelerator_patterns() -> None:
    from ray._private.accelerators import get_all_accelerator_resource_names

    for name in get_all_accelerator_resource_names():
        re.compile(_ACCELERATOR_PATTERN.format(name))


def run_as_main(path: str) -> None:
    """Run a script as `runpy.run_path(path, run_name="__main__")` runs it, with the code
    compiled ahead where the server compiled this path; the process ends after it, so the
    earlier `__main__` and argv[0] are not put back as run_path would."""
    code = _compiled.get(path)
    if code is None:
        runpy.run_path(path, run_name="__main__")
        return
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __loader__=None, __package__="",
                         __spec__=None)
    sys.modules["__main__"] = main
    sys.argv[0] = path
    exec(code, main.__dict__)  # noqa: S102  Ray's own worker script, as run_path runs it


def missing() -> list[str]:
    """What the warm-up reads of Ray that the installed Ray lacks or has changed."""
    import ray._private.accelerators as accelerators
    from ray.runtime_context import RuntimeContext

    from hpo.ray_adapters.reading import source

    shape = 'f"' + _ACCELERATOR_PATTERN.format("{accelerator_resource_name}") + '"'
    gaps = []
    if shape not in source(RuntimeContext.get_accelerator_ids):
        gaps.append(f"RuntimeContext.get_accelerator_ids matches {shape}")
    if not callable(getattr(accelerators, "get_all_accelerator_resource_names", None)):
        gaps.append("ray._private.accelerators.get_all_accelerator_resource_names()")
    return gaps
