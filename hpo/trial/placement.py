"""A trial's process, or a rank, runs on the CPUs near its GPU where the site's layout says
which (HPO_GPU_CORES, set on each Ray node by hpo.cluster.gpu_cores): data loading beside the
GPU stays on its own NUMA domain, and the ranks of a data-parallel trial on one node, one GPU
each, get disjoint CPUs. Without that table, or when the near CPUs are fewer than the trial
asked for, nothing is pinned."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

GPU_CORES_VAR = "HPO_GPU_CORES"
_started_on: set[int] | None = None  # the process's first mask: a reused worker re-pins


def gpu_cores(value: str) -> dict[str, set[int]]:
    """'0=1,2;1=3' -> {'0': {1, 2}, '1': {3}}; unreadable entries are left out."""
    table: dict[str, set[int]] = {}
    for entry in value.split(";"):
        gpu, _, cpus = entry.partition("=")
        with contextlib.suppress(ValueError):
            table[gpu.strip()] = {int(c) for c in cpus.split(",")}
    return table


def own_gpus() -> list[str]:
    """The node's ids of the GPUs Ray gave this worker (a trial's, or a rank's own); none for
    a CPU-only trial, whose CUDA_VISIBLE_DEVICES may still list every GPU of the node."""
    import ray

    if not ray.is_initialized():
        return []
    return [str(gpu) for gpu in ray.get_gpu_ids()]


def pin_near(gpus: list[str], cpus_wanted: int,
             env: Mapping[str, str] = os.environ) -> set[int] | None:
    """Run every thread of this process on the CPUs near `gpus` (within the mask the process
    started with); the CPUs chosen, or None when nothing was pinned."""
    global _started_on
    getaffinity = getattr(os, "sched_getaffinity", None)
    table = gpu_cores(env.get(GPU_CORES_VAR, ""))
    if getaffinity is None or not table or not gpus:
        return None
    if _started_on is None:
        _started_on = set(getaffinity(0))
    near = set().union(*(table.get(g, set()) for g in gpus)) & _started_on
    pinned = near if len(near) >= max(cpus_wanted, 1) else None
    for task in Path("/proc/self/task").iterdir():  # threads started earlier too
        with contextlib.suppress(OSError, ValueError):
            os.sched_setaffinity(int(task.name), pinned or _started_on)
    return pinned
