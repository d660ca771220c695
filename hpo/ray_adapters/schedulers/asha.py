"""ASHA's records, as read from Ray 2.60: `_trial_info` (trial ID -> its bracket), the
brackets with their rungs (`_brackets`: each `_rungs`, [(milestone, {trial ID: score})]), and
the counters. Keyed by ID already: put back whole after Tune re-added the trials (its
on_trial_add drew each restored trial's bracket anew)."""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import AsyncHyperBandScheduler

from hpo.ray_adapters.schedulers.carried import STREAMS, Kind, keys_of, lacks

ATTRS = ("_trial_info", "_brackets", "_counter", "_num_stopped")


def _applies(scheduler: Any) -> bool:
    # not RASDA's subclass (it has `gated`): its growth records come with its own kind
    return isinstance(scheduler, AsyncHyperBandScheduler) and not hasattr(scheduler, "gated")


KIND = Kind("ASHA", _applies, lambda scheduler: ATTRS + STREAMS, known=keys_of("_trial_info"))


def missing() -> list[str]:
    """What ASHA's carried state reads that the installed Ray lacks."""
    from ray.tune.schedulers.async_hyperband import _Bracket

    gaps = lacks(AsyncHyperBandScheduler(), ATTRS)
    rungs = vars(_Bracket(1, 4, 2, 0)).get("_rungs")
    if not (isinstance(rungs, list) and rungs and isinstance(rungs[0][1], dict)):
        gaps.append("_Bracket._rungs as [(milestone, {trial ID: score})]")
    return gaps
