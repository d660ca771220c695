"""A human summary of what a spec will do, for `hpo validate` (no Ray started)."""

from __future__ import annotations

import math
import os
from typing import Any

from hpo.spec.model import Spec
from hpo.spec.searchers import TPE_KEYS, Grid, Optuna


def trial_count(spec: Spec) -> int:
    """Trials Ray will create: num_samples, times the grid size for `grid` entries."""
    grid_kinds = ("grid", "choice") if isinstance(spec.search, Grid) else ("grid",)
    sizes = [len(d.args) for d in spec.search_space.values() if d.kind in grid_kinds]
    return spec.num_samples * math.prod(sizes)


def summarize(spec: Spec) -> dict[str, str]:
    """Key -> one line each: trials, concurrency, resources, scheduler, search, storage."""
    cpus = os.cpu_count() or 1
    fit = int(cpus // _cpus_per_trial(spec))
    limit = f", at most {spec.max_concurrent} (max_concurrent)" if spec.max_concurrent else ""
    sched = spec.scheduler.model_dump(exclude={"hyperparam_mutations"})
    return {
        "experiment": f"{spec.name} -> {spec.storage}/{spec.name}",
        "trainable": str(spec.trainable),
        "objective": _objectives(spec),
        "trials": str(trial_count(spec)),
        "concurrency": f"{fit} side by side on this machine ({cpus} CPUs){limit}",
        "resources": _resources(spec),
        "scheduler": ", ".join(f"{k}={v}" for k, v in sched.items()),
        "search": ", ".join(f"{k}={v}" for k, v in _search(spec).items()),
        "stop": str(spec.stop or "scheduler / trainable decides"),
    }


def _objectives(spec: Spec) -> str:
    shown = ", ".join(f"{mode} {metric}" for metric, mode in spec.objectives)
    return shown if len(spec.objectives) == 1 else f"{shown} (a Pareto front)"


def _search(spec: Spec) -> dict[str, Any]:
    """The searcher's settings, without those of the Optuna sampler it does not use."""
    shown = spec.search.model_dump()
    if isinstance(spec.search, Optuna):
        unused = ["population_size"] if spec.search.sampler == "tpe" else list(TPE_KEYS)
        shown = {k: v for k, v in shown.items() if k not in unused}
    return shown


def _cpus_per_trial(spec: Spec) -> float:
    ranks = spec.distributed
    return ranks.workers * ranks.cpus_per_worker if ranks else spec.resources.cpus_per_trial


def _resources(spec: Spec) -> str:
    ranks = spec.distributed
    if ranks is None:
        return (f"{spec.resources.cpus_per_trial:g} CPU, {spec.resources.gpus_per_trial:g} GPU "
                "per trial")
    count = str(ranks.workers)
    if ranks.max_workers and ranks.max_workers > ranks.workers:  # rasda grows them at rungs
        count = f"{ranks.workers} -> {ranks.max_workers}"
    return (f"{count} {ranks.backend} ranks per trial, each {ranks.cpus_per_worker:g} "
            f"CPU, {ranks.gpus_per_worker:g} GPU")
