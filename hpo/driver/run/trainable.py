"""The user's trainable: imported from text (`pkg.module:function`, `path/file.py:function`)
or handed over from Python (a function, closure, partial, Ray Tune class, or one bound to
large objects by `with_parameters`); the wrapper that runs it as a trial is
hpo.trial.one_process."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import re
import site
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

from hpo.errors import ConfigError, TrainableImportError
from hpo.spec._validation import did_you_mean
from hpo.spec.model import PYTHON_TRAINABLE, is_class_trainable, target
from hpo.trial.session import Trainable


@dataclasses.dataclass(frozen=True)
class WithParameters:
    """A trainable and the large objects each trial gets as keyword arguments; hpo puts them
    in Ray's object store once per run (see `with_parameters`)."""

    trainable: Any
    objects: dict[str, Any]

    @property
    def __wrapped__(self) -> Any:  # what the spec checks (a class cannot run on ranks)
        return self.trainable

    def __call__(self, config: dict[str, Any]) -> Any:
        """Outside Ray (a quick try in a notebook): call it with the objects themselves."""
        return self.trainable(config, **self.objects)


def with_parameters(trainable: Any, **objects: Any) -> WithParameters:
    """`trainable(config, **objects)` in every trial, each object put in Ray's store once."""
    if isinstance(trainable, WithParameters):
        return WithParameters(trainable.trainable, {**trainable.objects, **objects})
    return WithParameters(trainable, objects)


def resolve(trainable: str | Any, source: str,
            parameters: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """(the function or class to run, the objects it gets by reference)."""
    found = load_trainable(trainable, source) if isinstance(trainable, str) else trainable
    bound = with_parameters(found, **(parameters or {}))
    if isinstance(bound.trainable, WithParameters | str) or not callable(bound.trainable):
        raise ConfigError(source, "trainable", f"cannot run {bound.trainable!r:.60}",
                          "pass a function f(config) or a ray.tune.Trainable class")
    _check_call(bound.trainable, bound.objects, source)
    _ship_by_value(target(bound.trainable))
    return bound.trainable, bound.objects


def _check_call(func: Any, objects: dict[str, Any], source: str) -> None:
    """A function trainable is called as func(config, **objects): one that cannot be was
    found by Tune in the driver, after Ray had started, as a traceback."""
    if is_class_trainable(func):
        return
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # a builtin without a signature: Tune checks it
        return
    try:
        signature.bind({}, **dict.fromkeys(objects))
    except TypeError as error:
        name = getattr(func, "__name__", "trainable")
        call = "".join(f", {key}=..." for key in objects)
        raise ConfigError(source, "trainable", f"{name}{signature} cannot be called as "
                          f"{name}(config{call}) ({error})", "take the trial's config as the "
                          "one positional argument: def train(config): ...") from None


def _ship_by_value(func: Any) -> None:
    """Ray's workers import a function's module by name; they find only installed packages,
    the driver's cwd and its script's folder. A function from anywhere else (a module next to
    a notebook, a test file, a script imported from another folder) travels by value, as
    `__main__`'s do."""
    module = sys.modules.get(getattr(func, "__module__", None) or "")
    file = getattr(module, "__file__", None)
    if module is None or file is None or module.__name__.split(".")[0] in ("hpo", "ray"):
        return
    installed = {*site.getsitepackages(), site.getusersitepackages(),
                 sysconfig.get_paths()["stdlib"]}
    if any(Path(file).resolve().is_relative_to(Path(root).resolve()) for root in installed):
        return
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(module)


def python_name(trainable: Any) -> str:
    """How hpo-spec.yaml names a trainable passed from Python: `<python>:train`."""
    name = getattr(target(trainable), "__name__", type(trainable).__name__)
    return f"{PYTHON_TRAINABLE}:{re.sub(r'[^A-Za-z0-9_]', '_', name) or 'trainable'}"


def resets_config(cls: type[Any]) -> bool:
    """Whether a Ray Tune class implements reset_config (a reused actor needs it)."""
    from ray import tune

    return cls.reset_config is not tune.Trainable.reset_config


def load_trainable(ref: str, source: str = "<spec>") -> Trainable:
    """Import the function named by `ref`; every failure is a one-line TrainableImportError."""
    target, _, func_name = ref.rpartition(":")
    module = _import_file(target, source) if target.endswith(".py") else _import_module(
        target, source)
    func = getattr(module, func_name, None)
    if not callable(func):
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
        said = f"'{target}' has no function '{func_name}'" if func is None else \
            f"'{target}': '{func_name}' is not a function (it is {func!r:.40})"
        hint = did_you_mean(func_name, names) if names else \
            f"define def {func_name}(config): ... in it"
        raise TrainableImportError(source, "trainable", said, hint)
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
    assert spec is not None and spec.loader is not None  # a .py file has both
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise TrainableImportError(source, "trainable", f"cannot import '{path}' "
                                   f"({type(exc).__name__}: {exc})",
                                   "--debug shows the traceback") from exc
    # Workers cannot import this module by name: Ray must ship it by value.
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module
