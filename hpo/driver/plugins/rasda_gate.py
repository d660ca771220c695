"""RASDA's admission: a promoted trial due to grow comes before a new trial.

Tune asks its search algorithm for a new trial whenever fewer than its maximum are pending
(ray/tune/execution/tune_controller.py `_maybe_update_trial_queue`, Ray 2.60), and every
pending trial's placement group takes the next devices that free up. The `Gate` is closed
while a growth is due or under way (hpo.driver.plugins.rasda opens and closes it); `GatedSearch`
around the run's search algorithm then suggests nothing ("nothing now", as a Searcher's
`suggest` returning None: the search is not finished and Tune asks again next step).
The scheduler also keeps the number of pending trials small (hpo.ray_adapters.tune_rasda).
"""

from __future__ import annotations

from typing import Any

from ray.tune.search.basic_variant import BasicVariantGenerator
from ray.tune.search.concurrency_limiter import ConcurrencyLimiter
from ray.tune.search.search_algorithm import SearchAlgorithm
from ray.tune.search.search_generator import SearchGenerator
from ray.tune.search.searcher import Searcher

from hpo.ray_adapters import tune_rasda


class Gate:
    """Closed while any trial in `waiting` is due to grow or growing."""

    def __init__(self) -> None:
        self.waiting: set[str] = set()

    @property
    def open(self) -> bool:
        return not self.waiting

    def __getstate__(self) -> dict[str, Any]:
        # A growth belongs to the allocation it was due in: a resumed run starts open.
        return {"waiting": set()}


class GatedSearch(SearchAlgorithm):
    """A search algorithm that suggests no new trial while the gate is closed; everything
    else goes to the search it wraps (Tune's BasicVariantGenerator or SearchGenerator)."""

    def __init__(self, search: SearchAlgorithm, gate: Gate) -> None:
        self.search, self.gate = search, gate

    @property
    def searcher(self) -> Any:  # what Tune's _get_max_pending_trials walks through
        return getattr(self.search, "searcher", None)

    @property
    def metric(self) -> Any:
        return self.search.metric

    @property
    def total_samples(self) -> int:
        return self.search.total_samples

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        return tune_rasda.set_search_properties(self.search.set_search_properties, metric,
                                                   mode, config, **spec)

    def add_configurations(self, experiments: Any) -> None:
        self.search.add_configurations(experiments)

    def next_trial(self) -> Any:
        return self.search.next_trial() if self.gate.open else None

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.search.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        self.search.on_trial_complete(trial_id, result=result, error=error)

    def is_finished(self) -> bool:
        return self.search.is_finished()

    def set_finished(self) -> None:
        self.search.set_finished()

    def has_checkpoint(self, dirpath: str) -> bool:
        return self.search.has_checkpoint(dirpath)

    def save_to_dir(self, dirpath: str, **kwargs: Any) -> None:
        self.search.save_to_dir(dirpath, **kwargs)

    def restore_from_dir(self, dirpath: str) -> None:
        self.search.restore_from_dir(dirpath)


def gated(search: Any, gate: Gate, max_concurrent: int | None = None) -> GatedSearch:
    """`search` (a Searcher or a search algorithm, as hpo.spec.searchers builds them) behind
    `gate`. Tune applies max_concurrent_trials only to a bare Searcher: it is applied here,
    so pass none to Tune."""
    if isinstance(search, Searcher):
        if max_concurrent:
            search = ConcurrencyLimiter(search, max_concurrent=max_concurrent)
        search = SearchGenerator(search)
    elif isinstance(search, BasicVariantGenerator) and max_concurrent:
        search.max_concurrent = max_concurrent
    return GatedSearch(search, gate)
