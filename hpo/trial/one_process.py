"""The Tune trainable of a one-process trial: the user's function inside hpo's session (the
data-parallel one is hpo.trial.ranks.trial); and the large objects every trial gets by reference.

Objects are put in Ray's object store once per run and reach trials through a small holder
actor found by name, not as ObjectRefs captured in the pickled trainable: Ray pins a ref
pickled that way for the driver's whole life, and a notebook that keeps its Ray between runs
would keep every run's objects. The holder is killed when the run ends, which frees them.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpo.ray_adapters import gate, train_session
from hpo.trial import cost, placement, session
from hpo.trial.session import Trainable, tune_storage


def with_session(func: Trainable, checkpoint_every: int, cpus: float = 1,
                 metrics: tuple[str, ...] = ()) -> Trainable:
    """Wrap a trainable so `hpo.report` knows the checkpoint policy, the metrics it must see
    as numbers and the trial's cost (metered from here), and torch uses the trial's CPUs; Ray
    sees `func(config)`."""

    @functools.wraps(func)
    def run_trial(config: dict[str, Any]) -> Any:
        if gate.is_on("trial-reports"):
            train_session.artifact_syncs_timed_first()
        _keep_earlier_output()
        _use_cpus(cpus)
        placement.pin_near(placement.own_gpus(), int(cpus))
        try:
            with cost.metered(), session.trial_session(checkpoint_every, metrics=metrics):
                return func(config)
        finally:  # Tune copies the output files out when a trial ends, before it flushes them
            sys.stdout.flush()
            sys.stderr.flush()

    return run_trial


class _Holder:
    """Keeps the run's ObjectRefs (held in-band, so Ray counts them) for trials to ask for."""

    def __init__(self, refs: dict[str, Any]) -> None:
        self._refs = refs

    def refs(self) -> dict[str, Any]:
        return self._refs


@contextlib.contextmanager
def objects_in_store(objects: dict[str, Any]) -> Iterator[str | None]:
    """Put each object in Ray's store once; yield the name trials find them by (None if
    there are none); free them when the run ends."""
    if not objects:
        yield None
        return
    import ray

    name = f"hpo-objects-{uuid.uuid4().hex[:12]}"
    refs = {key: ray.put(value) for key, value in objects.items()}
    holder = ray.remote(num_cpus=0)(_Holder).options(name=name).remote(refs)
    try:
        yield name
    finally:
        ray.kill(holder)


def fetch_objects(holder: str) -> dict[str, Any]:
    """The run's objects, in a trial or a rank (numpy arrays: read-only, shared memory)."""
    import ray

    refs = ray.get(ray.get_actor(holder).refs.remote())
    return {key: ray.get(ref) for key, ref in refs.items()}


def call_with_objects(func: Any, holder: str, config: dict[str, Any]) -> Any:
    """`func(config, **objects)`; bound with functools.partial, it pickles as the name only."""
    return func(config, **fetch_objects(holder))


def class_with_objects(cls: type, holder: str) -> type:
    """A Ray Tune class whose setup(config) also gets the objects, as tune.with_parameters
    gives them."""

    class WithObjects(cls):
        def setup(self, config: dict[str, Any]) -> None:
            super().setup(config, **fetch_objects(holder))

    WithObjects.__name__ = WithObjects.__qualname__ = cls.__name__
    return WithObjects


def _use_cpus(cpus: float) -> None:
    """Ray fixes OMP_NUM_THREADS when a worker process starts (1 for a reused actor whatever
    the trial asks), and torch reads it once: give torch the trial's own CPUs, as a standalone
    script on those CPUs would have them (a torch imported later reads the variable)."""
    threads = max(1, int(cpus))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _keep_earlier_output() -> None:
    """A trial that runs again in a fresh working dir (`hpo resume`, a Slurm requeue, a retry on
    another node) would have its kept stdout/stderr replaced by the new, shorter ones when it
    ends: move those aside as stdout.1, stdout.2, ... (on the same node Tune appends instead)."""
    storage = tune_storage()
    if storage is None:
        return
    for name in ("stdout", "stderr"):
        kept = Path(storage.trial_fs_path, name)
        local = Path(storage.trial_working_directory, name)
        if kept.exists() and (not local.exists() or local.stat().st_size < kept.stat().st_size):
            free = (kept.with_name(f"{name}.{n}") for n in itertools.count(1))
            kept.rename(next(path for path in free if not path.exists()))
