"""HyperBand's records, as read from Ray 2.60: `_hyperbands` (bands of brackets, each bracket
holding its trials in `_live_trials` {Trial: last result}, `_all_trials` and
`trials_to_unpause`), `_trial_info` ({Trial: (bracket, band)}), `_state` (the bracket being
filled) and `_num_stopped`. All keyed by Trial objects: carried with trials as IDs
(hpo.ray_adapters.schedulers.carried) and put back on the resumed run's trials, over what its
on_trial_add built for them (each restored trial in a new bracket)."""

from __future__ import annotations

from ray.tune.schedulers import HyperBandScheduler

from hpo.ray_adapters.schedulers.carried import Kind, keys_of, lacks

ATTRS = ("_hyperbands", "_trial_info", "_state", "_num_stopped")
BRACKET_ATTRS = ("_live_trials", "_all_trials", "trials_to_unpause", "_n", "_r", "_cumul_r",
                 "_halves", "_completed_progress")

KIND = Kind("HyperBand", lambda scheduler: isinstance(scheduler, HyperBandScheduler),
            lambda scheduler: ATTRS, known=keys_of("_trial_info"))


def missing() -> list[str]:
    """What HyperBand's carried state reads that the installed Ray lacks."""
    from ray.tune.schedulers.hyperband import _Bracket

    gaps = lacks(HyperBandScheduler(), ATTRS)
    bracket = _Bracket("training_iteration", 3, 1, 4, 2, 1)
    gaps += lacks(bracket, BRACKET_ATTRS)
    if not isinstance(getattr(bracket, "_live_trials", None), dict):
        gaps.append("_Bracket._live_trials as {Trial: result}")
    return gaps
