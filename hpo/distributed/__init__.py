"""Data-parallel trials: each Tune trial runs the trainable on N ranks (Horovod or torch DDP).

The trial's own process holds a placement group of N worker bundles, starts one Ray actor per
rank inside it, and relays rank 0's reports (with checkpoints) to Tune. Stopping, pausing or
failing the trial ends every rank, since they are shut down with it.
"""

from hpo.distributed.trial import distributed_trainable

__all__ = ["distributed_trainable"]
