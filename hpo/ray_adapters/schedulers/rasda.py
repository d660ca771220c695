"""RASDA's records (hpo.driver.plugins.rasda): its ASHA's (hpo.ray_adapters.schedulers.asha),
what it measured of each trial (`_iteration_s`) and told (`_warned`), and the growth each
trial holds: its placement (the ranks it grew to). Not carried: the driver's handles (the
allocation's guard, the search's gate), built anew for the resumed run, and what belongs to one
allocation (the holds, the growths under way: a resumed trial's growth due is decided again
by RASDA's on_trial_add, from the rungs it passed)."""

from __future__ import annotations

from typing import Any

from ray.tune.experiment import Trial

from hpo.ray_adapters.schedulers import asha
from hpo.ray_adapters.schedulers.carried import STREAMS, Kind, keys_of

OWN = ("_iteration_s", "_warned")  # RASDA's, not Ray's


def _applies(scheduler: Any) -> bool:
    return hasattr(scheduler, "gated") and hasattr(scheduler, "_trial_info")


def _placements(scheduler: Any, trials: list[Trial]) -> dict[str, Any]:
    """Each unfinished trial's placement (a PlacementGroupFactory: one bundle per rank)."""
    return {trial.trial_id: trial.placement_group_factory for trial in trials
            if not trial.is_finished() and trial.placement_group_factory is not None}


def _fits(placement: Any) -> bool:
    """Whether the placement fits in the cluster as Ray sees it now (unknown: it does)."""
    import ray

    if not ray.is_initialized():
        return True
    total = ray.cluster_resources()
    need = placement.required_resources
    return all(need.get(key, 0) <= total.get(key, 0) for key in ("CPU", "GPU"))


def _regrow(scheduler: Any, placements: dict[str, Any], trials: dict[str, Trial]) -> None:
    """A trial grown before the stop gets its ranks back, where Tune rebuilt it smaller and
    the cluster can hold it."""
    for trial_id, placement in (placements or {}).items():
        trial = trials.get(trial_id)
        if trial is None or trial.status not in (Trial.PENDING, Trial.PAUSED):
            continue
        now = trial.placement_group_factory
        if len(placement.bundles) > len(now.bundles) and _fits(placement):
            trial.update_resources(placement)


KIND = Kind("RASDA", _applies, lambda scheduler: asha.ATTRS + OWN + STREAMS,
            known=keys_of("_trial_info"), extra=_placements, apply_extra=_regrow)


def missing() -> list[str]:
    """What RASDA's carried state reads that the installed Ray lacks (its ASHA's)."""
    return asha.missing()
