"""The cluster side: a Slurm allocation -> a running Ray cluster (never imports ray.tune)."""

from __future__ import annotations

from hpo.cluster.node_report import node_report

__all__ = ["node_report"]
