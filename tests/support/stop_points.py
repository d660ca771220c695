"""Fault injection for stop tests: a Tune callback that sends a signal at an exact instant.

`StopAt(signal, trial_index, iteration, marker)` fires once, when the trial started
`trial_index`-th reports `iteration`: after the result row is written (the trial loggers run
before user callbacks) and before Tune registers the checkpoint reported with it, the instant
where a stop used to double a step. `to_group` sends it to the whole process group, as a
terminal sends Ctrl+C. The marker file makes it fire once, also across `hpo resume` (Tune
stores callbacks with the experiment).

Run as a script, it is a stopped `hpo run` for the tests:
    python tests/support/stop_points.py STORAGE NAME SIGNAL TRIAL ITERATION [--group]
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from ray.tune import Callback

SPEC: dict[str, Any] = {
    "trainable": "tests/support/study_trainables.py:steady", "metric": "score", "mode": "max",
    "num_samples": 4, "max_concurrent": 2, "search_space": {"x": {"uniform": [0.0, 1.0]}},
    "constants": {"steps": 12, "sleep": 0.1}, "search": {"type": "random", "seed": 5},
    "checkpoint": {"frequency": 1, "keep": 1},
}


class StopAt(Callback):
    def __init__(self, signum: int, trial_index: int, iteration: int, marker: str,
                 to_group: bool = False) -> None:
        self.signum, self.trial_index, self.iteration = signum, trial_index, iteration
        self.marker, self.to_group = marker, to_group
        self._order: list[str] = []

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if trial.trial_id not in self._order:
            self._order.append(trial.trial_id)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        if Path(self.marker).exists() or trial.trial_id not in self._order:
            return
        if (self._order.index(trial.trial_id) == self.trial_index
                and result["training_iteration"] == self.iteration):
            Path(self.marker).write_text(f"{trial.trial_id} {self.iteration}\n")
            if self.to_group:
                os.killpg(os.getpgid(0), self.signum)
            else:
                os.kill(os.getpid(), self.signum)


def main(argv: list[str]) -> None:
    import hpo
    from hpo.errors import HpoError

    storage, name, signame, trial, iteration = argv[:5]
    stop = StopAt(getattr(signal, signame), int(trial), int(iteration),
                  str(Path(storage) / f"{name}.fired"), to_group="--group" in argv)
    try:
        hpo.run({**SPEC, "name": name}, storage=storage, callbacks=[stop], keep_ray=False)
    except HpoError as exc:
        print(f"hpo: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from stop_points import main as imported_main  # the class pickles under its module name

    imported_main(sys.argv[1:])
