"""The run's `stop:` keys checked in each trial's results, as Tune checks the metric: a key no
result holds ends the run at the first such result with one line (what the trial reported,
the closest key), where Tune would warn once into hpo.log and let every trial run to its end."""

from __future__ import annotations

import difflib
from typing import Any

from ray.tune import Callback
from ray.tune.utils import flatten_dict

from hpo.driver.run.outcome import trials_own


class StopKeyNotReported(Exception):
    """A result without one of the `stop:` keys; str() is the line to show."""


class StopKeysReported(Callback):
    """Ends the run at the first result that lacks a `stop:` key (Tune checks each key in
    the flattened result: a nested one is `outer/inner`)."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = list(keys)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        if all(key in result for key in self.keys):  # every result: no flattening, as a rule
            return
        flat = flatten_dict(result, delimiter="/")
        missing = [key for key in self.keys if key not in flat]
        if missing:
            raise StopKeyNotReported(stop_key_line(missing[0], list(flat)))


def stop_key_line(key: str, reported: list[str]) -> str:
    """One line: the stop key a result lacks, what the trial did report, the closest key."""
    own = trials_own(reported)
    close = difflib.get_close_matches(key, reported, n=1, cutoff=0.6)
    guess = f"did you mean '{close[0]}'? " if close else ""
    return (f"a trial reported {', '.join(map(repr, own)) or 'no metric'} but not the stop "
            f"key '{key}'. Hint: {guess}fix `stop:` in the YAML, or report it in every "
            "result (Tune checks the stop at each)")
