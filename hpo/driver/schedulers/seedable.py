"""Ray's schedulers that draw at random, with random streams of their own.

ASHA picks each trial's bracket with numpy's global RNG, PBT and PB2 explore with `random`
and numpy's: whatever else in the driver draws from those streams during a run (a library,
a thread) changes their choices. With `search.seed` each scheduler here draws from streams
seeded for it alone, swapped in around its own callbacks, so the seed repeats its choices
whatever else draws; the process's streams are left where they were. Imported only when a
scheduler is built (hpo.driver.schedulers.from_spec), as it imports Ray; the streams pickle
with the scheduler. PB2 has a module of its own (seedable_bandits).
"""

from __future__ import annotations

from ray.tune.schedulers import AsyncHyperBandScheduler, PopulationBasedTraining

from hpo.driver.schedulers.fifo_choice import SkipsEnded
from hpo.driver.schedulers.seeded_draws import SeedableDraws


class SeedableASHA(SeedableDraws, SkipsEnded, AsyncHyperBandScheduler):
    """ASHA (Ray's ASHAScheduler is this class under another name), choosing the next trial
    as Ray's does without rescanning the ended ones (hpo.driver.schedulers.fifo_choice)."""


class SeedablePBT(SeedableDraws, PopulationBasedTraining):
    """Population based training."""
