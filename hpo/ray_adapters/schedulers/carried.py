"""A scheduler's state as bytes that name trials by ID, and back onto a resumed run's trials.

Ray's schedulers key their records by Trial objects (HyperBand's brackets, PBT's per-trial
state, the median rule's results); a resumed run has new Trial objects with the same IDs.
The chosen attributes are pickled with each Trial written as its ID, and unpickled with each ID
read as the resumed run's Trial of that ID. A checkpoint save still in flight (PBT's
`_FutureTrainingResult`, which holds a reference into the stopped Ray) is written as FUTURE:
the scheduler's module puts the trial's own newest checkpoint in its place.
"""

from __future__ import annotations

import io
import pickle
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ray.tune.experiment import Trial

FUTURE = "<a checkpoint save in flight at the stop>"
# hpo's own: the random streams of a seeded scheduler (hpo.driver.schedulers.seeded_draws)
STREAMS = ("_own_streams",)


class UnknownTrial(KeyError):
    """The saved state names a trial the resumed run does not hold."""


@dataclass(frozen=True)
class Kind:
    """What is carried for one kind of scheduler: its attributes, and what is done after they
    are put back (`after(scheduler, trials by ID)`), or saved beside them (`extra`)."""

    name: str
    applies: Callable[[Any], bool]
    attrs: Callable[[Any], tuple[str, ...]]
    # the IDs of the trials the saved records hold; each unfinished one must be among them
    # (None: the records hold only some, as the median rule's hold those that reported)
    known: Callable[[dict[str, Any]], set[str]] | None = None
    after: Callable[[Any, dict[str, Trial]], None] | None = None
    extra: Callable[[Any, list[Trial]], Any] = field(default=lambda scheduler, trials: None)
    apply_extra: Callable[[Any, Any, dict[str, Trial]], None] | None = None


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, Trial):
            return ("trial", obj.trial_id)
        if type(obj).__name__ == "_FutureTrainingResult":
            return ("future", "")
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, trials: dict[str, Trial]) -> None:
        super().__init__(io.BytesIO(data))
        self.trials = trials

    def persistent_load(self, pid: Any) -> Any:
        kind, trial_id = pid
        if kind == "future":
            return FUTURE
        if trial_id not in self.trials:
            raise UnknownTrial(trial_id)
        return self.trials[trial_id]


def dumps(scheduler: Any, names: Iterable[str]) -> bytes:
    """The named attributes that the scheduler holds, pickled with trials as their IDs."""
    values = {name: getattr(scheduler, name) for name in names if name in vars(scheduler)}
    # a defaultdict's factory may be a lambda: saved as a dict, put back into the one it has
    values = {name: dict(value) if isinstance(value, defaultdict) else value
              for name, value in values.items()}
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(values)
    return buffer.getvalue()


def loads(data: bytes, trials: dict[str, Trial]) -> dict[str, Any]:
    """The attributes, on the trials of these IDs; UnknownTrial: one they name is not held."""
    return _Unpickler(data, trials).load()


def keys_of(name: str) -> Callable[[dict[str, Any]], set[str]]:
    """`known` for records whose attribute `name` is keyed by trial ID or by Trial."""
    return lambda values: {getattr(key, "trial_id", key) for key in values.get(name, {})}


def put_back(scheduler: Any, values: dict[str, Any]) -> None:
    """Each saved attribute into the scheduler. A dict, set or list is filled in place: a
    defaultdict keeps the factory its constructor gave it (the median rule's are lambdas,
    which do not pickle)."""
    for name, value in values.items():
        current = vars(scheduler).get(name)
        if isinstance(current, dict) and isinstance(value, dict):
            current.clear()
            current.update(value)
        elif isinstance(current, (set, list)) and type(value) is type(current):
            current.clear()
            current.extend(value) if isinstance(current, list) else current.update(value)
        else:
            setattr(scheduler, name, value)


def lacks(instance: Any, names: Iterable[str]) -> list[str]:
    """The names a freshly built Ray object lacks, as `Class.name`."""
    return [f"{type(instance).__name__}.{name}" for name in names
            if name not in vars(instance)]
