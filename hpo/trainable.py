"""Importing the user's trainable (`pkg.module:function` or `path/file.py:function`)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from hpo.errors import TrainableImportError
from hpo.validation import did_you_mean

Trainable = Callable[[dict[str, Any]], Any]


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


def with_session(func: Trainable, checkpoint_every: int) -> Trainable:
    """Wrap a trainable so `hpo.report` knows the checkpoint policy; Ray sees `func(config)`."""
    from hpo import session

    @functools.wraps(func)
    def run_trial(config: dict[str, Any]) -> Any:
        _keep_earlier_output()
        try:
            with session.trial_session(checkpoint_every):
                return func(config)
        finally:  # Tune copies the output files out when a trial ends, before it flushes them
            sys.stdout.flush()
            sys.stderr.flush()

    return run_trial


def _tune_storage() -> Any:
    """Ray Tune's storage context of the trial running in this process (None outside Tune)."""
    from ray.train._internal.session import get_session

    return getattr(get_session(), "storage", None)


def trial_folder() -> str | None:
    """The running trial's folder in the experiment folder (None outside Tune)."""
    storage = _tune_storage()
    return storage.trial_fs_path if storage else None


def _keep_earlier_output() -> None:
    """A trial that runs again in a fresh working dir (`hpo resume`, a Slurm requeue, a retry on
    another node) would have its kept stdout/stderr replaced by the new, shorter ones when it
    ends: move those aside as stdout.1, stdout.2, ... (on the same node Tune appends instead)."""
    storage = _tune_storage()
    if storage is None:
        return
    for name in ("stdout", "stderr"):
        kept = Path(storage.trial_fs_path, name)
        local = Path(storage.trial_working_directory, name)
        if kept.exists() and (not local.exists() or local.stat().st_size < kept.stat().st_size):
            free = (kept.with_name(f"{name}.{n}") for n in itertools.count(1))
            kept.rename(next(path for path in free if not path.exists()))
