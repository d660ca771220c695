"""Data-parallel trials: each Tune trial runs the trainable on N ranks (Horovod or torch DDP).

The trial's own process holds a placement group of N worker bundles, starts one Ray actor per
rank inside it, and relays rank 0's reports (with checkpoints) to Tune. The next trial that
Tune runs in the same process reuses those ranks when they ended clean (`pool`); a failed or
hung trial's ranks are shut down with it. (Modules import Ray; this package file does not, so
`hpo validate` stays quick.)
"""

from __future__ import annotations

import importlib.util

from hpo.errors import ConfigError
from hpo.spec.model import Spec


def check_backend(spec: Spec, source: str) -> None:
    """Fail before anything starts when the chosen backend is not installed."""
    if spec.distributed and spec.distributed.backend == "horovod" and (
            importlib.util.find_spec("horovod") is None):
        raise ConfigError(source, "distributed.backend", "'horovod' is not installed",
                          "`hpo install horovod` builds it (--cuda for NCCL); or use backend: ddp")
