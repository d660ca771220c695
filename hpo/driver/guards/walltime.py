"""Walltime-aware promotion: when the allocation ends, how long a trial's iteration takes on
so many ranks, and whether a rung (or a growth step) can finish before the end minus the
checkpoint margin (`slurm.signal_seconds`: when Slurm's walltime warning comes).

The end: SLURM_JOB_END_TIME (epoch seconds) where Slurm sets it (22.05 may not), else
`squeue -h -o %e -j JOB`, else `scontrol show job JOB`; and `--time-limit` seconds from now
(tests, runs outside Slurm), whichever comes first.

When nothing fits any more the run stops exactly as on the walltime warning: USR1 goes to
the batch shell when it traps USR1 (hpo's sbatch script: it requeues the job after hpo ends,
and the next run resumes), and to Tune in this process once its loop runs (its own handler:
it saves the experiment and returns; a warning before that would be lost). The guard gives
that warning itself at the end minus the margin too, so `--time-limit` ends a run like a job.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import signal
import statistics
import subprocess
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from hpo.cluster.slurm_env import job_end_time, lookup

log = logging.getLogger("hpo.walltime")

_SLURM_TIME = "%Y-%m-%dT%H:%M:%S"
_KEEP = 5  # iteration times kept per trial and rank count: recent ones, after a resize
# A restart on other ranks (pause, a new placement group, rank start-up, restore) before one
# was measured: the GPU trial start measured on an H100 took about 20 s (docs/benchmarks.md).
RESTART_S = 30.0


def parse_end_time(text: str) -> float | None:
    """Epoch seconds of a Slurm time (local time, as squeue/scontrol print it); None for
    N/A, Unknown, NONE or nothing.

    Example:
        >>> parse_end_time("Unknown") is None
        True
    """
    text = text.strip()
    if not text or text.upper() in ("N/A", "UNKNOWN", "NONE", "INVALID"):
        return None
    try:
        return time.mktime(time.strptime(text, _SLURM_TIME))
    except ValueError:
        raise ValueError(f"not a Slurm time: {text!r}") from None


def scontrol_end_time(text: str) -> float | None:
    """EndTime of `scontrol show job` output (None when missing or unknown)."""
    match = re.search(r"\bEndTime=(\S+)", text)
    return parse_end_time(match.group(1)) if match else None


def catches(status: str, signum: int) -> bool:
    """Whether the process whose /proc/PID/status this is has a handler for `signum`."""
    match = re.search(r"^SigCgt:\s*([0-9a-fA-F]+)$", status, re.MULTILINE)
    return match is not None and bool(int(match.group(1), 16) >> (signum - 1) & 1)


def query_end_time(job_id: str, run: Callable[..., Any] = subprocess.run) -> float | None:
    """The job's end from squeue, else scontrol; None when neither answers."""
    for args, parse in ((["squeue", "-h", "-o", "%e", "-j", job_id], parse_end_time),
                        (["scontrol", "show", "job", job_id], scontrol_end_time)):
        try:
            done = run(args, capture_output=True, text=True, timeout=30, check=False)
            if done.returncode == 0 and done.stdout.strip():
                return parse(done.stdout.splitlines()[0] if parse is parse_end_time
                             else done.stdout)
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            log.debug("%s: %s", args[0], exc)
    return None


def warn_batch_shell() -> bool:
    """Slurm's walltime warning to the batch shell, if it is our parent and traps USR1 (hpo's
    sbatch script requeues the job after we exit); whether it was sent."""
    parent = os.getppid()
    with contextlib.suppress(OSError):
        if lookup(os.environ, "job_id") and catches(
                Path(f"/proc/{parent}/status").read_text(), signal.SIGUSR1):
            os.kill(parent, signal.SIGUSR1)
            return True
    return False


def _mean(times: deque[float]) -> float:
    return sum(times) / len(times)


class WalltimeGuard:
    """Whether more iterations of a trial fit before `end - margin_s` (epoch seconds).

    The seconds per iteration of a trial on `ranks` ranks, first that found:
      1. its own measured mean (the last 5 `time_this_iter_s`) at `ranks`;
      2. its own mean at the nearest measured rank count, scaled by the median ratio seen in
         other trials measured at both counts; without one, no speed-up is assumed from more
         ranks (and linear slow-down with fewer): an estimate that errs towards stopping;
      3. the same from the median of the other trials' means, for a trial not yet measured;
      4. nothing measured at all: allowed.
    Work on other ranks than the trial last reported on also pays a restart: the median of
    those measured (the gap between a trial's last result before a resize and its first
    after, less that iteration), else RESTART_S.
    Work that would not fit even into a whole fresh allocation of this length is allowed too:
    refusing it would requeue for ever; it runs until the warning and goes on after it.
    """

    def __init__(self, end: float, margin_s: float, *, clock: Callable[[], float] = time.time,
                 stop: Callable[[], object] = warn_batch_shell, source: str = "") -> None:
        self.end, self.margin_s, self.source = end, margin_s, source
        self._clock, self._stop = clock, stop
        self.span_s = end - clock()  # this allocation's length, as far as we can tell
        self._times: dict[tuple[str, int], deque[float]] = defaultdict(
            lambda: deque(maxlen=_KEEP))
        self._stopped = threading.Event()
        self._last: dict[str, tuple[int, float]] = {}  # trial -> (ranks, clock) of its last
        self._restarts: deque[float] = deque(maxlen=_KEEP)

    @classmethod
    def from_environment(cls, env: Mapping[str, str] = os.environ,
                         time_limit_s: float | None = None, margin_s: float = 300.0, *,
                         clock: Callable[[], float] = time.time,
                         query: Callable[[str], float | None] = query_end_time,
                         ) -> WalltimeGuard | None:
        """The guard of this run: the allocation's end inside Slurm, `time_limit_s` from now,
        the earlier of both; None outside Slurm without a limit (or an unknown end)."""
        ends: list[tuple[float, str]] = []
        if time_limit_s is not None:
            ends.append((clock() + time_limit_s, "--time-limit"))
        job_id = lookup(env, "job_id")
        end = job_end_time(env)
        if end is not None:
            ends.append((end, "SLURM_JOB_END_TIME"))
        elif job_id and (end := query(job_id)) is not None:
            ends.append((end, f"squeue/scontrol for job {job_id}"))
        if not ends:
            return None
        end, source = min(ends)
        return cls(end, margin_s, clock=clock, source=source)

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # A scheduler pickled with its guard (Tune's tuner.pkl) gets the guard of the run
        # that unpickles it: a requeued job's allocation ends later than the first one's.
        return current, ()

    @property
    def deadline(self) -> float:
        """Epoch seconds by which work must be done: the end minus the checkpoint margin."""
        return self.end - self.margin_s

    def remaining_s(self) -> float:
        return self.deadline - self._clock()

    def exhausted(self) -> bool:
        """The deadline has passed: nothing more should start."""
        return self.remaining_s() <= 0

    def record(self, trial_id: str, ranks: int, result: Mapping[str, Any]) -> None:
        """Learn from one result: its `time_this_iter_s` on `ranks` ranks."""
        seconds = result.get("time_this_iter_s")
        if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
            return
        self._times[trial_id, ranks].append(float(seconds))
        now, before = self._clock(), self._last.get(trial_id)
        if before is not None and before[0] != ranks:
            self._restarts.append(max(0.0, now - before[1] - seconds))
        self._last[trial_id] = (ranks, now)

    def restart_s(self) -> float:
        """Seconds a trial loses moving to other ranks: measured (median), else RESTART_S."""
        return statistics.median(self._restarts) if self._restarts else RESTART_S

    def seconds_per_iteration(self, trial_id: str, ranks: int) -> float | None:
        """The estimate of the class docstring's rule; None when nothing was measured."""
        own = {r: _mean(t) for (trial, r), t in self._times.items() if trial == trial_id}
        if not own:
            pooled: dict[int, list[float]] = defaultdict(list)
            for (_, r), t in self._times.items():
                pooled[r].append(_mean(t))
            own = {r: statistics.median(m) for r, m in pooled.items()}
        if not own:
            return None
        if ranks in own:
            return own[ranks]
        nearest = min(own, key=lambda r: (abs(math.log(r / ranks)), r))
        return own[nearest] * self._scale(nearest, ranks)

    def _scale(self, have: int, want: int) -> float:
        """How much longer an iteration on `want` ranks takes than on `have`, as measured in
        trials that ran on both, else no gain from more ranks, linear loss with fewer."""
        ratios = [_mean(self._times[trial, want]) / _mean(t)
                  for (trial, r), t in list(self._times.items())
                  if r == have and (trial, want) in self._times]
        return statistics.median(ratios) if ratios else max(1.0, have / want)

    def allows(self, trial_id: str, iterations: int, ranks: int) -> bool:
        """Whether `iterations` more iterations of `trial_id` on `ranks` ranks end before the
        deadline, a restart included where `ranks` differs from the trial's last (see the
        class docstring for the estimate)."""
        per_iteration = self.seconds_per_iteration(trial_id, ranks)
        if per_iteration is None:
            return not self.exhausted()
        last = self._last.get(trial_id)
        need = iterations * per_iteration + (
            self.restart_s() if last is not None and last[0] != ranks else 0.0)
        return need <= self.remaining_s() or need > self.span_s - self.margin_s

    def stop_run(self, reason: str) -> None:
        """Checkpoint and stop the experiment as Slurm's walltime warning does (a requeue in
        hpo's sbatch script, else a resumable stop); once. Tune gets it from `active`."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        log.warning("hpo: walltime: stopping %.0f s before the end (%s, from %s): %s; the "
                    "experiment is saved and continues after the requeue (or `hpo resume`)",
                    self.end - self._clock(), time.strftime(_SLURM_TIME,
                                                           time.localtime(self.end)),
                    self.source, reason)
        self._stop()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()


_current: WalltimeGuard | None = None


def current() -> WalltimeGuard | None:
    """The guard of the run in progress in this process, if any."""
    return _current


def _watch(guard: WalltimeGuard, ended: threading.Event, before: Any) -> None:
    """Warn at the deadline unless stop_run came first; then stop Tune with USR1 as soon as
    its loop has put its own handler in place of the one `before` it."""
    while not guard.stopped and not ended.wait(min(max(guard.remaining_s(), 0.0), 0.2)):
        if guard.exhausted():
            guard.stop_run("the end minus the checkpoint margin is reached")
    while not ended.is_set():
        handler = signal.getsignal(signal.SIGUSR1)
        if handler is not before and callable(handler):
            os.kill(os.getpid(), signal.SIGUSR1)
            return
        ended.wait(0.1)


@contextlib.contextmanager
def active(guard: WalltimeGuard | None) -> Iterator[WalltimeGuard | None]:
    """Make `guard` the run's (for `current()` and unpickled schedulers) and give the warning
    at its deadline, whether or not Slurm does (`--time-limit`, a job without requeue). Enter
    it before Tune starts, in the main thread."""
    global _current
    if guard is None:
        yield None
        return
    ended = threading.Event()
    watcher = threading.Thread(target=_watch, name="hpo-walltime", daemon=True,
                               args=(guard, ended, signal.getsignal(signal.SIGUSR1)))
    _current = guard
    watcher.start()
    try:
        yield guard
    finally:
        ended.set()
        watcher.join(timeout=5)
        _current = None
