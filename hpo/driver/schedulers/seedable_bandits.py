"""PB2 drawing from streams of its own (hpo.driver.schedulers.seedable), apart from the other
schedulers: importing Ray's PB2 imports scikit-learn and SciPy (0.9 s), which no other
scheduler's run needs."""

from __future__ import annotations

from ray.tune.schedulers.pb2 import PB2

from hpo.driver.schedulers.seeded_draws import SeedableDraws


class SeedablePB2(SeedableDraws, PB2):
    """Population based bandits."""
