"""A stop (Ctrl+C, SIGTERM) while a run starts, before Tune's loop takes the signals over:
the run ends at once with one line, and a folder this run made is removed, so nothing is left
behind and the same command starts it again.

Python leaves SIGINT ignored when it starts with SIGINT ignored (a command started with `&`
from a script); `ray.init` replaces SIGTERM's handler with its own `sys.exit`. So the
handlers are put in place at the start and again after Ray starts. From just before Tune's
loop a stop is only noted: Tune installs its handlers as its loop starts and HeldStop
(hpo.driver.guards.stops) takes that stop over, so that it ends the run saved.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from hpo.errors import RunError

_SIGNALS: dict[int, str] = {signal.SIGINT: "SIGINT (Ctrl+C)", signal.SIGTERM: "SIGTERM"}


class StoppedAtStart(RunError):
    """A stop signal arrived before any trial started."""


class _Interrupted(BaseException):  # noqa: N818 - raised by a signal, like KeyboardInterrupt
    """Raised in the main thread by the signal: a BaseException, so that no `except
    Exception` on the way (Ray's start catches and logs some) swallows it."""


class _StartStops:
    """The handlers of one start-up: the first signal raises StoppedAtStart in the main
    thread, and again at the next check should the code it interrupted swallow it; later
    signals are ignored while the start-up unwinds (Ray stops, the lease goes)."""

    def __init__(self) -> None:
        self.before: dict[int, Any] = {}
        self.fired_by: str | None = None
        # Raised where it lands only while hpo imports and checks (Python code): landing
        # inside Ray's start (its C++ core, its threads) crashed the process (SIGSEGV,
        # SIGABRT). From then on the stop waits for the next check().
        self.interrupting = True
        self.handed_over = False  # Tune's loop starts: a stop waits for HeldStop
        self.taken = False  # HeldStop took over: a signal here goes where it went before
        self.pending: int | None = None
        self.unraisable_before: Any = None

    def arm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach the main thread only
        if self.unraisable_before is None:
            self.unraisable_before = sys.unraisablehook
            sys.unraisablehook = self._unraisable
        for signum in _SIGNALS:
            handler = signal.getsignal(signum)
            if handler != self._on_signal:
                self.before.setdefault(signum, handler)
                signal.signal(signum, self._on_signal)

    def disarm(self) -> None:
        for signum, handler in self.before.items():
            if handler is not None:
                signal.signal(signum, handler)
        self.before.clear()
        if sys.unraisablehook == self._unraisable:  # not if another hook replaced it since
            sys.unraisablehook = self.unraisable_before
        self.unraisable_before = None

    def _unraisable(self, unraisable: Any) -> None:
        # The stop landed in code whose exceptions Python only prints ("Exception ignored
        # in": a weakref callback of the import lock, a __del__): it is noted in fired_by,
        # and the next check() raises it, so nothing is printed.
        if unraisable.exc_type is not _Interrupted:
            (self.unraisable_before or sys.__unraisablehook__)(unraisable)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.taken:  # Tune put this handler back as its "original": a second Ctrl+C
            _pass_to(self.before.get(signum), signum, frame)  # must still end the process
            return
        if self.handed_over:
            self.pending = signum
            return
        if self.fired_by is None:
            self.fired_by = _SIGNALS[signum]
            if self.interrupting:  # at once; code that swallows it meets check() later
                raise _Interrupted

    def check(self) -> None:
        if self.fired_by is not None:
            raise _Interrupted

    def error(self) -> StoppedAtStart:
        return StoppedAtStart(f"the run stopped by {self.fired_by} during start-up, before "
                              "any trial started; nothing was saved. Hint: run the same "
                              "command again to start it")


_current: _StartStops | None = None


@contextlib.contextmanager
def start_stops() -> Iterator[None]:
    """Stop signals end the start-up until `tune_takes_over()` (or the block's end), with
    StoppedAtStart; nested blocks share the outermost's handlers (the CLI arms them before
    its imports, the run again)."""
    global _current
    if _current is not None:
        try:
            yield
        except _Interrupted:
            raise _current.error() from None
        return
    _current = stops = _StartStops()
    stops.arm()
    try:
        yield
    except _Interrupted:
        raise stops.error() from None
    except SystemExit as exc:  # SIGTERM while ray.init ran: Ray's own handler exits with 15
        if exc.code != signal.SIGTERM:
            raise
        stops.fired_by = _SIGNALS[signal.SIGTERM]
        raise stops.error() from None
    finally:
        stops.disarm()
        _current = None


def ray_starts() -> None:
    """From here on a signal is only noted, and acted on at the next check."""
    if _current is not None:
        _current.check()  # a stop that landed where it was swallowed: before Ray starts
        _current.interrupting = False


def rearm() -> None:
    """After `ray.init`, which put its own SIGTERM handler in place (and may have swallowed
    the stop raised inside it)."""
    if _current is not None:
        _current.check()
        _current.arm()


def tune_takes_over() -> None:
    """Just before Tune's loop: its handlers (and hpo's HeldStop) take the signals; a stop
    until they do is noted for HeldStop (Python's default handlers in between ended the
    process unsaved: SIGTERM's kills it, SIGINT's raises inside Tune's set-up)."""
    if _current is not None:
        _current.check()
        _current.handed_over = True


def stop_before_tune() -> int | None:
    """The stop signal that came after tune_takes_over() and before Tune's loop took the
    signals (HeldStop.setup passes it on), once."""
    if _current is None:
        return None
    _current.taken = True
    pending, _current.pending = _current.pending, None
    return pending


def _pass_to(handler: Any, signum: int, frame: Any) -> None:
    """What the handler before hpo's would have done: call it, or the default action."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
