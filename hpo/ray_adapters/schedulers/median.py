"""The median stopping rule's records, as read from Ray 2.60: `_results` ({Trial: [results]}),
`_trial_state`, `_last_pause` ({Trial: time}) and `_stopped_trials`. Keyed by Trial objects:
carried with trials as IDs (hpo.ray_adapters.schedulers.carried); the defaultdicts keep the
factories the rule was built with. Only the trials that reported are named in them."""

from __future__ import annotations

from ray.tune.schedulers import MedianStoppingRule

from hpo.ray_adapters.schedulers.carried import Kind, lacks

ATTRS = ("_results", "_trial_state", "_last_pause", "_stopped_trials")

KIND = Kind("MedianStoppingRule", lambda scheduler: isinstance(scheduler, MedianStoppingRule),
            lambda scheduler: ATTRS)


def missing() -> list[str]:
    """What the median rule's carried state reads that the installed Ray lacks."""
    rule = MedianStoppingRule()
    gaps = lacks(rule, ATTRS)
    if not isinstance(vars(rule).get("_results"), dict):
        gaps.append("MedianStoppingRule._results as {Trial: [result]}")
    return gaps
