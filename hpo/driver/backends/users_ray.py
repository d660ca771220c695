"""The Ray this process's own `ray.init` started or joined (a notebook's): a run uses it as
Tune does, and leaves it running."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

from hpo.cluster.auth import TUNE_OUTPUT_ENV, environ_overlay
from hpo.driver.backends.ray_log import log_ray_to, stop_logging


@contextlib.contextmanager
def users_ray(log_file: Path, num_cpus: int | None) -> Iterator[dict[str, float]]:
    """Its resources while the block runs (num_cpus cannot change them: a warning where it
    differs). Its workers start as Ray starts them."""
    import ray

    resources = ray.cluster_resources()
    cpus = resources.get("CPU", 0)
    if num_cpus is not None and num_cpus != cpus:
        warnings.warn(f"hpo.run: num_cpus={num_cpus} is not applied: the run uses the Ray "
                      f"this process's ray.init started, with {cpus:g} CPUs", stacklevel=5)
    handler = log_ray_to(log_file)
    logging.getLogger("hpo.cluster").info(
        "running on the Ray this process's ray.init started (%s CPUs); it stays running", cpus)
    try:
        with environ_overlay(TUNE_OUTPUT_ENV):
            yield resources
    finally:
        stop_logging(handler)
