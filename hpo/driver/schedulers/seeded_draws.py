"""The mixin that gives a Ray scheduler random streams of its own (seedable says why): apart
from the schedulers, so that PB2 (seedable_bandits) and the others need not import each
other."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

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
            return super().on_trial_add(*args, **kwargs)  # type: ignore[misc]  # a mixin

    def on_trial_result(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().on_trial_result(*args, **kwargs)  # type: ignore[misc]  # a mixin

    def on_trial_complete(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().on_trial_complete(*args, **kwargs)  # type: ignore[misc]  # a mixin

    def on_trial_error(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().on_trial_error(*args, **kwargs)  # type: ignore[misc]  # a mixin

    def on_trial_remove(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().on_trial_remove(*args, **kwargs)  # type: ignore[misc]  # a mixin

    def choose_trial_to_run(self, *args: Any, **kwargs: Any) -> Any:
        with self._own_draws():
            return super().choose_trial_to_run(*args, **kwargs)  # type: ignore[misc]  # a mixin
