"""The cluster side: a Slurm allocation -> a running Ray cluster (never imports ray.tune)."""

from __future__ import annotations

from hpo.cluster.describe import describe

__all__ = ["describe"]
