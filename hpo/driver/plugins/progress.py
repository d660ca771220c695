"""A compact live view of a run (trial states, best so far, elapsed), as a Tune callback.

It redraws in place at most twice a second on a terminal; elsewhere (CI logs, pipes) Rich
prints only the final view. The callback pickles without its console, because Tune stores
callbacks in the experiment folder and `hpo resume` brings them back.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from typing import Any

from ray.tune.progress_reporter import TrialProgressCallback
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from hpo.driver.guards.stops import stopped_by

_SHOWN_RUNNING = 8


def unfinished_line(started: int, waiting: int) -> str:
    """The one count of a stop's unfinished trials (the live view's last frame and the run's
    error line): those that had started and those that had not."""
    return (f"{started + waiting} trial(s) unfinished ({started} had started, {waiting} had "
            "not)")


class LiveProgress(TrialProgressCallback):
    """Replaces Tune's own per-trial printer (Tune adds that one unless a subclass is given)."""

    def __init__(self, objectives: list[tuple[str, str]], total: int) -> None:
        # Several objectives have no single best: the view shows each one's value, and
        # `hpo best` the Pareto front once trials end.
        self.objectives, self.total = list(objectives), total
        self.metric, self.mode = objectives[0]
        self._reset()

    def _reset(self) -> None:
        self._live: Live | None = None
        self._start = time.monotonic()
        self._drawn = 0.0
        self._best: tuple[float, str, dict[str, Any]] | None = None
        self._latest: dict[str, dict[str, Any]] = {}
        self._stopped: Group | None = None  # the frame at a stop
        self._handled_at_start: BaseException | None = None
        self._seeded = False  # the restored trials' bests, taken at the first step

    def __getstate__(self) -> dict[str, Any]:
        return {"objectives": self.objectives, "total": self.total}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # An experiment saved before several objectives existed pickled metric and mode.
        type(self).__init__(self, state.get("objectives") or [(state["metric"], state["mode"])],
                            state["total"])

    def setup(self, **info: Any) -> None:
        self._handled_at_start = sys.exc_info()[1]  # a caller's own, not the run's error
        self._live = Live(console=_console(), auto_refresh=False, transient=False)
        self._live.start()

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        self._latest[trial.trial_id] = result
        self._offer(result.get(self.metric), trial)

    def _offer(self, value: Any, trial: Any) -> None:
        one = len(self.objectives) == 1
        if one and isinstance(value, (int, float)) and math.isfinite(value) and \
                self._better(value, trial.trial_id):  # NaN: last in the table, never best
            self._best = (float(value), trial.trial_id, dict(trial.config))

    def _seed(self, trials: list) -> None:
        """Count what the trials reported before a stop (`hpo resume`): Tune restores each
        trial's min and max of every metric with it, so no result file is read. Taking a best
        twice changes nothing, so trials that report afresh need no care."""
        self._seeded = True
        for trial in trials:
            seen = getattr(trial, "metric_analysis", {}).get(self.metric, {})
            self._offer(seen.get(self.mode), trial)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        # Shown by the next redraw; only running trials' results are kept (10,000 trials'
        # last results held 10-20 MB in the driver).
        self._latest.pop(trial.trial_id, None)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._latest.pop(trial.trial_id, None)  # the summary lists failed trials

    def _better(self, value: float, trial_id: str) -> bool:
        """Better than the best so far; a tie goes to the smaller trial id, as in the results
        table (hpo.results): the view and `hpo best` name the same trial."""
        if self._best is None:
            return True
        best, best_id = self._best[0], self._best[1]
        if value == best:
            return trial_id < best_id
        return value > best if self.mode == "max" else value < best

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if not self._seeded:
            self._seed(trials)
        if self._stopped is None and stopped_by():
            # Tune stops every trial before the last frame: keep the states the stop found.
            self._stopped = self._render(trials, stopped_by())
        if self._live and time.monotonic() - self._drawn > 0.5:
            self._draw(trials)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        if not self._seeded:  # a run that ended before its first step did
            self._seed(trials)
        if self._live:
            self._drawn = time.monotonic()
            # Tune ends a run that raised (a metric or stop key not reported, a callback's
            # error) from its except block, once it has marked every running trial
            # terminated: say it ended on the error instead of counting those states.
            aborted = sys.exc_info()[1] not in (None, self._handled_at_start)
            self._live.update(self._stopped or self._render(trials, aborted=aborted),
                              refresh=True)
            self._live.stop()
            if not self._live.console.is_terminal:
                self._live.console.line()  # Rich ends a non-terminal final frame mid-line
            self._live = None

    def _draw(self, trials: list) -> None:
        self._drawn = time.monotonic()
        self._live.update(self._render(trials), refresh=True)  # type: ignore[union-attr]  # set

    def _render(self, trials: list, stopped: str | None = None, aborted: bool = False) -> Group:
        states = Counter(t.status for t in trials)
        elapsed = time.monotonic() - self._start
        counted = "ended on an error (below)" if aborted else "  ".join(
            f"{s.lower()} {n}" for s, n in sorted(states.items()))
        head = Text(f"{len(trials)}/{self.total} trials  {counted}  elapsed {elapsed:.0f}s")
        best = self._headline()
        if stopped:
            started = states["RUNNING"] + states["PAUSED"]
            waiting = states["PENDING"] + max(self.total - len(trials), 0)
            best += f"\nstopped by {stopped}: {unfinished_line(started, waiting)}"
        running = [t for t in trials if t.status == "RUNNING"][:_SHOWN_RUNNING]
        if not running:
            return Group(head, Text(best, style="bold"))
        names = [metric for metric, _ in self.objectives]
        # data-parallel trials' rank counts (rasda grows them at rungs)
        ranked = any("ranks" in self._latest.get(t.trial_id, {}) for t in running)
        # the node, once trials run on several (a Slurm job's nodes, joined jobs' nodes)
        hosts = {self._latest.get(t.trial_id, {}).get("hostname") for t in running} - {None}
        columns = ["trial", "iter", *(["node"] if len(hosts) > 1 else []),
                   *(["ranks"] if ranked else []), *names, "config"]
        table = Table(*columns, box=None, pad_edge=False)
        for trial in running:
            result = self._latest.get(trial.trial_id, {})
            ranks = [str(result.get("ranks", "-"))] if ranked else []
            ranks = ([str(result.get("hostname", "-"))] if len(hosts) > 1 else []) + ranks
            table.add_row(trial.trial_id, str(result.get("training_iteration", 0)), *ranks,
                          *(_value(result.get(name)) for name in names),
                          _short(trial.config))
        return Group(head, Text(best, style="bold"), table)

    def _headline(self) -> str:
        if len(self.objectives) > 1:
            return "objectives " + ", ".join(f"{m} ({d})" for m, d in self.objectives) + (
                "; `hpo best` lists their Pareto front")
        if self._best is None:
            return "best: none yet"
        return f"best {self.metric} {self._best[0]:.4g} (trial {self._best[1]}) {self._best[2]}"


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"


def _short(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in config.items())[:80]


def _console() -> Console:
    """stderr; in Jupyter the live view needs ipywidgets, and without them rich warns once and
    draws nothing: print plain frames instead."""
    console = Console(stderr=True)
    if console.is_jupyter:
        try:
            import ipywidgets  # noqa: F401
        except ImportError:
            return Console(stderr=True, force_jupyter=False)
    return console
