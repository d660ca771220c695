"""Every reach of the driver's run and guards into Ray's private parts, in one place, as read
from Ray 2.60.0 (RASDA's reaches into Tune are in hpo.driver.plugins.ray_internals).

Ray names none of these public; tests/test_ray_private.py checks each against the installed
Ray and fails loudly when one is gone or changed:
  - ray._private.parameter.RayParams: the parameters `ray.init` builds to start a node; its
    __init__ is wrapped for a block so that each one built in it has no_monitor=True and
    include_log_monitor=False (both are __init__ parameters and attributes);
  - ray.tune.experiment.trial.Trial._handle_ray_actor_error(self, exc): what Tune does when a
    trial's actor dies (a RayActorError: counted against max_failures unless preempted),
    replaced for a block by a handler that may forgive the death or hand it on.
Ray is imported only when one of these is called.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

RAY_VERSION = "2.60.0"  # the version these were read from

# What a handler of actor errors is given: the trial, the RayActorError, and Tune's own
# handling (count it), to call for a death it does not forgive.
ActorErrorHandler = Callable[[Any, BaseException, Callable[[Any, BaseException], None]], None]

_LEAN = {"no_monitor": True, "include_log_monitor": False}


@contextlib.contextmanager
def without_monitors() -> Iterator[None]:
    """While the block runs, every RayParams built (the one `ray.init` builds to start its
    node) has no autoscaler monitor and no log monitor; restored after."""
    from ray._private.parameter import RayParams

    original = RayParams.__init__

    def lean(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        for name, value in _LEAN.items():
            setattr(self, name, value)

    RayParams.__init__ = lean  # type: ignore[method-assign]
    try:
        yield
    finally:
        RayParams.__init__ = original  # type: ignore[method-assign]


@contextlib.contextmanager
def actor_errors_handled_by(handler: ActorErrorHandler) -> Iterator[None]:
    """While the block runs, Tune hands each trial actor's death to handler(trial, exc,
    counted) instead of counting it; Tune's own handling is restored after."""
    from ray.tune.experiment.trial import Trial

    counted = Trial._handle_ray_actor_error

    def handle(trial: Any, exc: Any) -> None:
        handler(trial, exc, counted)

    Trial._handle_ray_actor_error = handle  # type: ignore[method-assign]
    try:
        yield
    finally:
        Trial._handle_ray_actor_error = counted  # type: ignore[method-assign]


def missing() -> list[str]:
    """What this module reads that the installed Ray lacks (empty: all there)."""
    from ray._private.parameter import RayParams
    from ray.tune.experiment.trial import Trial

    gaps = []
    params = inspect.signature(RayParams.__init__).parameters
    built = RayParams()
    gaps += [f"RayParams({name}=...)" for name in _LEAN
             if name not in params or not hasattr(built, name)]
    handle = getattr(Trial, "_handle_ray_actor_error", None)
    if not callable(handle) or list(inspect.signature(handle).parameters) != ["self", "exc"]:
        gaps.append("Trial._handle_ray_actor_error(self, exc)")
    return gaps
