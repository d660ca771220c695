"""Every reach of RASDA into Ray Tune's private parts, in one place, as read from Ray 2.60.0.

Ray names none of these public; tests/driver/test_rasda.py (`test_ray_still_has_what_rasda_reads`)
checks each against the installed Ray and fails loudly when one is gone or changed:
  - AsyncHyperBandScheduler._trial_info (trial id -> _Bracket) and _Bracket._rungs
    ([(milestone, {trial id: value})]): the rungs a trial passed;
  - the controller's _resource_updater.get_num_cpus()/get_num_gpus(): the cluster's size;
  - TrialRunnerWrapper._tune_controller: schedulers get a wrapper that warns on any name
    not on its list; update_max_pending_trials is not on it;
  - TuneController.update_max_pending_trials(n) (public on the controller, n >= 1; 0 or
    None means Ray's default), ._actor_cache (an _ObjectCache keyed by the placement group
    factory: pop_cached_object(key)) and ._remove_actor(tracked_actor);
  - ray.tune.search.util._set_search_properties_backwards_compatible(set_search_properties_func,
    metric, mode, config, **spec): how Tune hands a search its metric, mode and space (again
    without **spec, warning, to a searcher whose set_search_properties takes none).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from hpo.ray_adapters.reading import source


def controller_of(view: Any) -> Any:
    """The TuneController behind what a scheduler is given (a TrialRunnerWrapper from
    on_trial_add/choose_trial_to_run, the controller itself from on_trial_error/complete)."""
    return getattr(view, "_tune_controller", view)


def rungs_passed(scheduler: Any, trial_id: str) -> int:
    """How many of its bracket's rungs recorded this trial (0: unknown to the scheduler)."""
    bracket = scheduler._trial_info.get(trial_id)
    if bracket is None:
        return 0
    return sum(1 for _, recorded in bracket._rungs if trial_id in recorded)


def cluster_total(view: Any) -> dict[str, float]:
    """The cluster's CPUs and GPUs, as Tune last read them."""
    updater = controller_of(view)._resource_updater
    return {"CPU": float(updater.get_num_cpus()), "GPU": float(updater.get_num_gpus())}


def bound_pending_trials(view: Any, count: int) -> None:
    """Let Tune keep at most `count` (>= 1) trials pending with placement groups requested:
    each one takes the next devices that free up, before a grown trial."""
    controller_of(view).update_max_pending_trials(max(1, count))


def drop_cached_actor(view: Any, resources: Any) -> None:
    """Stop one actor of this shape (a PlacementGroupFactory) that Tune keeps for reuse
    (reuse_actors), if it keeps one: a growing trial's old actor, kept with its placement
    group, would go to a pending trial of its old shape or hold devices that the grown
    placement group needs. The others stay for the trials they can serve."""
    controller = controller_of(view)
    actor = controller._actor_cache.pop_cached_object(resources)
    if actor is not None:
        controller._remove_actor(tracked_actor=actor)


def set_search_properties(set_properties: Callable[..., bool], metric: str | None,
                          mode: str | None, config: dict, **spec: Any) -> bool:
    """Call a search's set_search_properties(metric, mode, config, **spec) as Tune does: a
    searcher that takes no **spec is called again without it (Ray warns)."""
    from ray.tune.search.util import _set_search_properties_backwards_compatible

    return _set_search_properties_backwards_compatible(set_properties, metric, mode, config,
                                                       **spec)


_SET_PROPERTIES = ["set_search_properties_func", "metric", "mode", "config", "spec"]


def _set_properties_gap() -> list[str]:
    from ray.tune.search import util

    wrapper = getattr(util, "_set_search_properties_backwards_compatible", None)
    if not callable(wrapper):
        return ["ray.tune.search.util._set_search_properties_backwards_compatible"]
    params = list(inspect.signature(wrapper).parameters.values())
    if ([p.name for p in params] != _SET_PROPERTIES
            or params[-1].kind is not inspect.Parameter.VAR_KEYWORD
            or any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in params[:-1])):
        return [f"_set_search_properties_backwards_compatible{inspect.signature(wrapper)}"]
    return []


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    from ray.tune.execution.tune_controller import TrialRunnerWrapper, TuneController
    from ray.tune.execution.tune_controller import _ObjectCache as ObjectCache
    from ray.tune.schedulers.async_hyperband import AsyncHyperBandScheduler, _Bracket

    gaps = []
    asha = AsyncHyperBandScheduler(max_t=4, grace_period=1, reduction_factor=2)
    if not isinstance(getattr(asha, "_trial_info", None), dict):
        gaps.append("AsyncHyperBandScheduler._trial_info")
    rungs = getattr(_Bracket(1, 4, 2, 0), "_rungs", None)
    if not (isinstance(rungs, list) and rungs and isinstance(rungs[0][1], dict)):
        gaps.append("_Bracket._rungs as [(milestone, {trial id: value})]")
    wants = {TuneController: ("_resource_updater", "_actor_cache", "update_max_pending_trials",
                              "_remove_actor"),
             TrialRunnerWrapper: ("_tune_controller",), ObjectCache: ("pop_cached_object",)}
    for cls, names in wants.items():
        text = source(cls)
        gaps += [f"{cls.__name__}.{n}" for n in names if f"{n}" not in text]
    for method, params in ((TuneController.update_max_pending_trials, ["max_pending_trials"]),
                           (TuneController._remove_actor, ["tracked_actor"]),
                           (ObjectCache.pop_cached_object, ["key"])):
        if list(inspect.signature(method).parameters)[1:] != params:
            gaps.append(f"{method.__qualname__}{inspect.signature(method)}")
    return gaps + _set_properties_gap()
