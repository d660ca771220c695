"""Stops that neither lose nor double a step: Ctrl+C, SIGTERM, Slurm's USR1 warning, hpo's own.

Tune writes a trial's result row when the result arrives and registers the checkpoint reported
with it one event later. A stop acted on in between saved an experiment state whose trial
points at the previous checkpoint while the row is on disk, and `hpo resume` reported that step
a second time. `HeldStop` holds a stop until no trial's checkpoint is in flight (at most
`grace_s`), then hands it to Tune's own handler, which ends the loop and saves the state.
(A row that no checkpoint covers, as with `checkpoint.frequency` > 1, is re-run on resume by
design: hpo.driver.guards.history cuts the trial's history back to its checkpoint when it restarts.)

SIGTERM (scancel, preemption, the end of a job) is taken like USR1: Ray's own handler, set by
`ray.init`, exits at once and skips Tune's last save. A second signal while one is held goes
to Tune at once; Tune's SIGINT handler then puts back the one before it (a third Ctrl+C
ends the process).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ray.tune import Callback

from hpo.driver.guards import start_stop, storage_faults

_log = logging.getLogger("hpo.stops")
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
_TERM_GRACE_S = 5.0
_NAMES: dict[int, str] = {signal.SIGINT: "SIGINT (Ctrl+C)", signal.SIGTERM: "SIGTERM",
                          signal.SIGUSR1: "SIGUSR1 (walltime warning)"}

# The stop in progress in this process (for the live view's last frame and the run's outcome).
_stopped_by: str | None = None


def stopped_by() -> str | None:
    """The signal that stopped the current run ("SIGTERM", ...), None while none did."""
    return _stopped_by


class HeldStop(Callback):
    """Hold a stop signal until no trial is saving a checkpoint, then pass it to Tune."""

    def __init__(self, grace_s: float = 20.0) -> None:
        self.grace_s = grace_s
        self._tune: Callable[[int, Any], None] | None = None
        self._held: tuple[int, Any, float] | None = None

    def __getstate__(self) -> dict[str, Any]:  # saved with the experiment: no handlers
        return {"grace_s": self.grace_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["grace_s"])

    def setup(self, **info: Any) -> None:
        """Called by Tune's controller after Tune put its handlers in place."""
        global _stopped_by
        _stopped_by = None
        tune_handler = signal.getsignal(signal.SIGUSR1)
        if threading.current_thread() is not threading.main_thread() or not callable(
                tune_handler):
            return  # Tune catches no signal outside the main thread either
        self._tune = tune_handler
        for signum in _SIGNALS:
            signal.signal(signum, self._on_signal)
        pending = start_stop.stop_before_tune()
        if pending is not None:  # it came while Tune's loop started: held as any other
            self._on_signal(pending, None)

    def _on_signal(self, signum: int, frame: Any) -> None:
        watch = storage_faults.current()
        if watch is not None and watch.fault is not None:
            # hpo's own stop for a full disk: the freed reserve is for Tune's last save, not
            # for more checkpoint uploads meanwhile.
            self._pass_on(signum, frame, "a storage fault")
            return
        if self._held is not None or self._tune is None:  # a second signal: no more waiting
            self._pass_on(signum, frame)
            return
        # SIGKILL follows SIGTERM after Slurm's KillWait (30 s by default): wait less then.
        grace = min(self.grace_s, _TERM_GRACE_S) if signum == signal.SIGTERM else self.grace_s
        self._held = (signum, frame, time.monotonic() + grace)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if self._held is None:
            return
        signum, frame, deadline = self._held
        saving = [t for t in trials if t.is_saving]
        if saving and time.monotonic() < deadline:
            return
        if saving:
            _log.warning("stopping with %d checkpoint(s) still in flight after %.0f s",
                         len(saving), self.grace_s)
        self._pass_on(signum, frame)

    def _pass_on(self, signum: int, frame: Any, cause: str | None = None) -> None:
        global _stopped_by
        _stopped_by = cause or _NAMES.get(signum, str(signum))
        self._held = None
        _log.warning("%s: stopping the run; Tune saves its state", _stopped_by)
        if self._tune is not None:
            self._tune(signum, frame)


@contextlib.contextmanager
def signals_restored() -> Iterator[None]:
    """Put back this process's stop handlers after a run (HeldStop replaces them inside it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None:
                signal.signal(signum, handler)
