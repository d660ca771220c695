"""A human summary of what a spec will do, for `hpo validate` (no Ray started)."""

from __future__ import annotations

import math
import os

from hpo.spec.model import Spec
from hpo.spec.searchers import Grid


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
        "trainable": spec.trainable,
        "objective": f"{spec.mode} {spec.metric}",
        "trials": str(trial_count(spec)),
        "concurrency": f"{fit} side by side on this machine ({cpus} CPUs){limit}",
        "resources": _resources(spec),
        "scheduler": ", ".join(f"{k}={v}" for k, v in sched.items()),
        "search": ", ".join(f"{k}={v}" for k, v in spec.search.model_dump().items()),
        "stop": str(spec.stop or "scheduler / trainable decides"),
    }


def _cpus_per_trial(spec: Spec) -> float:
    ranks = spec.distributed
    return ranks.workers * ranks.cpus_per_worker if ranks else spec.resources.cpus_per_trial


def _resources(spec: Spec) -> str:
    ranks = spec.distributed
    if ranks is None:
        return (f"{spec.resources.cpus_per_trial:g} CPU, {spec.resources.gpus_per_trial:g} GPU "
                "per trial")
    return (f"{ranks.workers} {ranks.backend} ranks per trial, each {ranks.cpus_per_worker:g} "
            f"CPU, {ranks.gpus_per_worker:g} GPU")
