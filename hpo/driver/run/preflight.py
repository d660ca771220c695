"""Every check that needs more than the spec itself, in one place and in the order a user
wants to hear of problems: what can be told before Ray starts (the trainable can be found, the
large-batch keys, a W&B login), what the imported trainable says (the backend is installed, a
Ray Tune class fits the spec), then what the cluster has (a trial fits in it and a rank on one
node). The spec's own validation (hpo.spec) comes before all of them; each check raises a
one-line ConfigError naming the YAML path."""

from __future__ import annotations

import contextlib
import operator
import os
from collections.abc import Mapping
from typing import Any

from hpo.cluster.own_import import check_working_folder
from hpo.driver.run.trainable import check_findable, resets_config
from hpo.errors import ConfigError
from hpo.ray_adapters import gate
from hpo.spec.growth import rank_counts
from hpo.spec.model import Spec, is_class_trainable
from hpo.spec.schedulers import Rasda
from hpo.trial.ranks import check_backend


def before_ray(spec: Spec, source: str) -> None:
    """What the spec and this machine tell before Ray starts."""
    check_working_folder(source)  # a ./hpo the trials would import instead of this one
    if isinstance(spec.trainable, str):  # a wrong name fails before anything starts
        check_findable(spec.trainable, source)
    check_batch_keys(spec, source)
    spec.tracking.check_login(source, os.environ)  # W&B online needs its key: before Ray
    gate.check_at_start(source, needed_patches(spec))


def needed_patches(spec: Spec) -> dict[str, str]:
    """The feature patches this spec needs (hpo.ray_adapters.registry), each with the key that
    needs it: every run's exact histories, and what its keys ask for."""
    needed = {"history": "storage", "trial-session": "trainable"}
    if spec.checkpoint.keep is not None:
        needed["snapshot-deletes"] = "checkpoint.keep"
    if spec.scheduler is not None and getattr(spec.scheduler, "type", "") == "rasda":
        needed["rasda"] = "scheduler.type"
    return needed


def check_parameters(parameters: Any, source: str) -> None:
    """`parameters=` maps the trainable's keyword names to objects (a raw TypeError from deep
    in the run before)."""
    if parameters is None:
        return
    if not isinstance(parameters, Mapping) or not all(isinstance(key, str) for key in parameters):
        got = type(parameters).__name__ if not isinstance(parameters, Mapping) else \
            f"keys {list(parameters)[:5]!r}"
        raise ConfigError(source, "parameters", f"must map keyword names to objects (got "
                          f"{got})", "e.g. hpo.run(spec, trainable=train, "
                          "parameters={'data': array}) calls train(config, data=array)")


def check_num_cpus(num_cpus: Any, source: str) -> int | None:
    """The embedded Ray's CPUs as an int: a whole number of at least 1, or None (0 was blamed
    on the trials' resources after Ray had started)."""
    if num_cpus is None:
        return None
    with contextlib.suppress(TypeError):  # int and NumPy's ints; not a float or a bool
        if not isinstance(num_cpus, bool) and operator.index(num_cpus) >= 1:
            return operator.index(num_cpus)
    raise ConfigError(source, "num_cpus", f"must be a whole number of at least 1 (got "
                      f"{num_cpus!r})", "leave it out to use all of this machine's CPUs")


def with_trainable(spec: Spec, source: str, func: Any) -> None:
    """What the imported trainable tells (it is imported while Ray starts)."""
    check_backend(spec, source)
    if is_class_trainable(func):
        check_class(spec, source, func)


def on_cluster(spec: Spec, source: str, total: dict[str, float],
               nodes: list[dict[str, float]]) -> None:
    """What the running cluster tells: its total and each alive node's resources."""
    check_fits(spec, source, total)
    check_node_fits(spec, source, nodes)


def check_batch_keys(spec: Spec, source: str) -> None:
    """The large-batch keys among the constants (hpo.trial.large_batch: the global batch, the
    reference batch, `batch_schedule`, the removed keys), checked before anything starts,
    with each searched value that can be told beforehand in their place. Only where they are
    hpo's: for the built-in trainables, or when `batch_schedule` is given; a user's own
    trainable may mean something else by `warmup_epochs`."""
    from hpo.trial.large_batch import SCHEDULE, check_trial_config

    ours = isinstance(spec.trainable, str) and spec.trainable.startswith("trainables.")
    named = [*spec.constants, *spec.search_space]
    if not ours and not any(k.split(".")[0] == SCHEDULE for k in named):
        return
    configs = [(spec.constants, None), *(({**spec.constants, key: value}, key)
                                         for key, value in _searched_batch_values(spec))]
    for workers in _rank_counts(spec):  # a growing trial's batch must split on each
        for config, searched in configs:
            try:
                check_trial_config(config, source, workers)
            except ConfigError as exc:
                where = "search_space" if exc.path == searched else "constants"
                raise ConfigError(source, f"{where}.{exc.path}", exc.message,
                                  exc.hint) from None
    _check_noise_backend(spec, source, [config for config, _ in configs])


def _check_noise_backend(spec: Spec, source: str, configs: list[dict[str, Any]]) -> None:
    """`batch_schedule.grow: noise` (given or searched) measures on DDP's gradient buckets."""
    from hpo.trial.batch_keys import schedule_fields

    backend = spec.distributed.backend if spec.distributed else None
    if backend not in (None, "ddp") and any(
            schedule_fields(config, source).get("grow") == "noise" for config in configs):
        raise ConfigError(source, "distributed.backend", f"{backend}: batch_schedule.grow: "
                          "noise is measured on DDP's gradient buckets", "use backend: ddp")


def _searched_batch_values(spec: Spec) -> list[tuple[str, Any]]:
    """The values of searched large-batch keys that can be told before a trial draws them:
    every value of a choice or grid, the lowest draw of a range (the keys' least values)."""
    from hpo.trial.large_batch import SCHEDULE

    found = []
    for key, dist in spec.search_space.items():
        if key.split(".")[0] == SCHEDULE or key in ("batch_size", "lr_reference_batch"):
            values = dist.args if dist.kind in ("choice", "grid") else (
                [_lowest_draw(dist.args)] if dist.bounds else [])
            found += [(key, value) for value in values]
    return found


def _lowest_draw(args: tuple[Any, ...]) -> Any:
    """The smallest value a range can draw: its low end, or for a q-range (low, high, q) the
    multiple of q Ray rounds the low end to (quniform [100, 1000, 64] draws 128 first)."""
    if len(args) < 3:
        return args[0]
    low, _, q = args
    return round(low / q) * q


def _rank_counts(spec: Spec) -> list[int]:
    ranks = spec.distributed
    if ranks is None:
        return [1]
    if isinstance(spec.scheduler, Rasda) and spec.scheduler.batch == "fixed":
        return rank_counts(spec.scheduler, ranks.workers, ranks.max_workers or ranks.workers)
    return [ranks.workers]  # a batch that grows with the ranks splits if the first does


def check_class(spec: Spec, source: str, cls: Any) -> None:
    # The spec checks a class passed from Python; one imported from text is seen only here.
    if spec.distributed:
        raise ConfigError(source, "distributed", f"cannot run a Ray Tune class trainable "
                          f"({cls.__name__}) on ranks", "a class trainable runs as a "
                          "one-process trial: drop distributed")
    if not isinstance(cls, type):
        raise ConfigError(source, "trainable", f"pass the class {cls.__name__} itself",
                          "give it objects with hpo.with_parameters or parameters=")
    if "reuse_actors" in spec.model_fields_set and spec.reuse_actors and not resets_config(cls):
        raise ConfigError(source, "reuse_actors", f"{cls.__name__} has no reset_config, which "
                          "a reused actor needs", "implement reset_config(new_config) "
                          "returning True, or drop reuse_actors")


def check_fits(spec: Spec, source: str, cluster: dict[str, float]) -> None:
    """Fail fast (instead of Tune waiting forever) when one trial needs more than exists."""
    ranks = spec.distributed
    for key, need in (("CPU", spec.resources.cpus_per_trial),
                      ("GPU", spec.resources.gpus_per_trial)):
        field = f"resources.{key.lower()}s_per_trial"
        if ranks:
            field = f"distributed.{key.lower()}s_per_worker"
            need = ranks.workers * getattr(ranks, f"{key.lower()}s_per_worker")
        have = cluster.get(key, 0.0)
        if need > have:
            raise ConfigError(source, field,
                              f"one trial needs {need:g} {key}s but the cluster has {have:g}",
                              "lower it, or run on a node/allocation that has them")
        grown = ranks.max_workers * getattr(ranks, f"{key.lower()}s_per_worker") \
            if ranks and ranks.max_workers else 0
        if ranks and grown > have:
            raise ConfigError(source, "distributed.max_workers", f"a trial may grow to "
                              f"{ranks.max_workers} ranks = {grown:g} {key}s but the cluster "
                              f"has {have:g}", "lower max_workers")


def check_node_fits(spec: Spec, source: str, nodes: list[dict[str, float]]) -> None:
    """A rank, or a one-process trial, runs on one node: the biggest node must hold it (Tune
    would wait forever for a bundle no node can give)."""
    ranks = spec.distributed
    what, section = ("rank", "distributed") if ranks else ("trial", "resources")
    for key in ("CPU", "GPU"):
        name = f"{key.lower()}s_per_{'worker' if ranks else 'trial'}"
        need = getattr(ranks or spec.resources, name)
        biggest = max((node.get(key, 0.0) for node in nodes), default=0.0)
        if need > biggest:
            raise ConfigError(source, f"{section}.{name}", f"one {what} needs {need:g} {key}s "
                              f"but the biggest node has {biggest:g}",
                              f"a {what} runs on one node: ask for at most one node's share")
