"""Importing the user's trainable (`pkg.module:function` or `path/file.py:function`); the
wrapper that runs it as a one-process trial is hpo.driver.wrapper."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from hpo.errors import TrainableImportError
from hpo.session import Trainable
from hpo.spec._validation import did_you_mean


def load_trainable(ref: str, source: str = "<spec>") -> Trainable:
    """Import the function named by `ref`; every failure is a one-line TrainableImportError."""
    target, _, func_name = ref.rpartition(":")
    module = _import_file(target, source) if target.endswith(".py") else _import_module(
        target, source)
    func = getattr(module, func_name, None)
    if not callable(func):
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
        raise TrainableImportError(source, "trainable", f"'{target}' has no function "
                                   f"'{func_name}'", did_you_mean(func_name, names))
    return func


def check_findable(ref: str, source: str = "<spec>") -> None:
    """Fail on a missing module or file without importing it (torch and friends take
    seconds): `hpo run` imports the trainable while Ray starts, after this check."""
    target, _, _ = ref.rpartition(":")
    if target.endswith(".py"):
        if not Path(target).resolve().is_file():
            _import_file(target, source)  # raises the file-not-found error
        return
    _add_cwd_to_path()
    try:
        found = importlib.util.find_spec(target) is not None
    except (ImportError, ValueError):  # a parent package is missing or broken
        found = False
    if not found:
        _import_module(target, source)  # raises the usual one-line error


def _add_cwd_to_path() -> None:
    cwd = str(Path.cwd())
    if cwd not in sys.path:  # `trainables.x` next to the YAML, as `python -m` would find it
        sys.path.insert(0, cwd)


def _import_module(name: str, source: str) -> ModuleType:
    _add_cwd_to_path()
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise TrainableImportError(source, "trainable", f"cannot import '{name}' "
                                   f"({type(exc).__name__}: {exc})",
                                   "check the module path and that it imports cleanly "
                                   "(--debug shows the traceback)") from exc


def _import_file(path: str, source: str) -> ModuleType:
    file = Path(path).resolve()
    if not file.is_file():
        raise TrainableImportError(source, "trainable", f"file not found: {path}",
                                   "paths are relative to the current directory")
    name = f"hpo_user_{file.stem}_{abs(hash(str(file))):x}"
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as exc:
        del sys.modules[name]
        raise TrainableImportError(source, "trainable", f"cannot import '{path}' "
                                   f"({type(exc).__name__}: {exc})",
                                   "--debug shows the traceback") from exc
    # Workers cannot import this module by name: Ray must ship it by value.
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module
