"""Ray's schedulers that draw at random, with random streams of their own.

ASHA picks each trial's bracket with numpy's global RNG, PBT and PB2 explore with `random`
and numpy's: whatever else in the driver draws from those streams during a run (a library,
a thread) changes their choices. With `search.seed` each scheduler here draws from streams
seeded for it alone, swapped in around its own callbacks, so the seed repeats its choices
whatever else draws; the process's streams are left where they were. Imported only by
`build()` (it imports Ray); the streams pickle with the scheduler.
"""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import AsyncHyperBandScheduler, PopulationBasedTraining

from hpo.spec.fifo_choice import SkipsEnded
from hpo.spec.seeded_draws import SeedableDraws


class SeedableASHA(SeedableDraws, SkipsEnded, AsyncHyperBandScheduler):
    """ASHA (Ray's ASHAScheduler is this class under another name), choosing the next trial
    as Ray's does without rescanning the ended ones (hpo.spec.fifo_choice)."""


class SeedablePBT(SeedableDraws, PopulationBasedTraining):
    """Population based training."""


def __getattr__(name: str) -> Any:
    # SeedablePB2 lives in hpo.spec.seedable_bandits: Ray's PB2 imports scikit-learn and SciPy
    # (0.9 s), which no other scheduler's run needs. An experiment saved before
    # names it here.
    if name == "SeedablePB2":
        from hpo.spec.seedable_bandits import SeedablePB2

        return SeedablePB2
    raise AttributeError(name)
