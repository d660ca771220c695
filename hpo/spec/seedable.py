"""Ray's schedulers that draw at random, with random streams of their own.

ASHA picks each trial's bracket with numpy's global RNG, PBT and PB2 explore with `random`
and numpy's: whatever else in the driver draws from those streams during a run (a library,
a thread) changes their choices. With `search.seed` each scheduler here draws from streams
seeded for it alone, swapped in around its own callbacks, so the seed repeats its choices
whatever else draws; the process's streams are left where they were. Imported only by
`build()` (it imports Ray); the streams pickle with the scheduler.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
from ray.tune.schedulers import AsyncHyperBandScheduler, PopulationBasedTraining

_Streams = tuple[Any, Any]  # random.getstate(), np.random.get_state()


class SeedableDraws:
    """Mixin (first base) for a Ray scheduler: after seed_draws(seed), every callback of Tune's
    draws from this scheduler's own streams."""

    _own_streams: _Streams | None = None
    _drawing = False

    def seed_draws(self, seed: int) -> None:
        # the states random.seed(seed) and np.random.seed(seed) would give the process
        self._own_streams = (random.Random(seed).getstate(),
                             np.random.RandomState(seed).get_state())

    @contextlib.contextmanager
    def _own_draws(self) -> Iterator[None]:
        if self._own_streams is None or self._drawing:  # unseeded, or a nested callback
            yield
            return
        saved = random.getstate(), np.random.get_state()
        random.setstate(self._own_streams[0])
        np.random.set_state(self._own_streams[1])
        self._drawing = True
        try:
            yield
        finally:
            self._own_streams = random.getstate(), np.random.get_state()
            random.setstate(saved[0])
            np.random.set_state(saved[1])
            self._drawing = False

    def on_trial_add(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().on_trial_add(*args, **kwargs)  # type: ignore[misc]

    def on_trial_result(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().on_trial_result(*args, **kwargs)  # type: ignore[misc]

    def on_trial_complete(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().on_trial_complete(*args, **kwargs)  # type: ignore[misc]

    def on_trial_error(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().on_trial_error(*args, **kwargs)  # type: ignore[misc]

    def on_trial_remove(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().on_trial_remove(*args, **kwargs)  # type: ignore[misc]

    def choose_trial_to_run(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().choose_trial_to_run(*args, **kwargs)  # type: ignore[misc]


class SeedableASHA(SeedableDraws, AsyncHyperBandScheduler):
    """ASHA (Ray's ASHAScheduler is this class under another name)."""


class SeedablePBT(SeedableDraws, PopulationBasedTraining):
    """Population based training."""


def __getattr__(name: str) -> Any:
    # SeedablePB2 is made on first use: Ray's PB2 imports scikit-learn and SciPy (0.9 s,
    # issue 36), which no other scheduler's run needs. It pickles as this module's.
    if name != "SeedablePB2":
        raise AttributeError(name)
    from ray.tune.schedulers.pb2 import PB2

    made = type(name, (SeedableDraws, PB2), {"__doc__": "Population based bandits.",
                                             "__module__": __name__})
    globals()[name] = made
    return made
