"""The experiment over wall time, as tables: when and where each trial ran (the timeline) and
the best metric found so far. Pure pandas, from the reports' `timestamp` (the UNIX time of
each report: hpo.report's own clock, else Ray's whole seconds), `time_since_restore` and
`hostname`.

Example:
    >>> spans = trial_spans(exp)  # trial_id, hostname, status, start, end (UNIX seconds)
    >>> spans["lane"] = lanes(spans)  # "node1 #0", "node1 #1", ...: one row of the timeline
"""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd

from hpo.reporting.data import Experiment

RESOLUTION_S = 1.0  # Ray's whole seconds, where a report has no time of hpo.report's


def trial_spans(exp: Experiment) -> pd.DataFrame:
    """One row per trial that reported: it started `time_since_restore` before its first
    report and ended at its last one (a paused PBT trial's span covers its pause)."""
    timed = exp.curves.dropna(subset=["timestamp"]).sort_values("timestamp", kind="stable")
    columns = ["trial_id", "hostname", "status", "start", "end"]
    if timed.empty:
        return pd.DataFrame(columns=columns)
    by_trial = timed.groupby("trial_id", sort=False)
    first = by_trial.head(1).set_index("trial_id")  # the earliest report
    spans = pd.DataFrame({
        "hostname": by_trial["hostname"].last().fillna("?").astype(str),
        "start": first["timestamp"] - first["time_since_restore"].fillna(0.0),
        "end": by_trial["timestamp"].max(),
    })
    status = exp.table.set_index("trial_id")["status"]
    spans["status"] = status.reindex(spans.index).fillna("?")
    return spans.reset_index(names="trial_id")[columns]


def lanes(spans: pd.DataFrame) -> pd.Series:
    """A row label per trial, "<host> #<n>": each host's trials packed into as few rows as do
    not overlap (the earliest-freed row first), so a row is roughly one slot of the node and
    a gap in it is time that slot sat idle."""
    labels: dict[int, str] = {}
    for host, group in spans.sort_values("start", kind="stable").groupby("hostname"):
        free: list[tuple[float, int]] = []  # (end of its last trial, row) per row in use
        for index, start, end in zip(group.index, group["start"], group["end"], strict=True):
            if free and free[0][0] <= start + RESOLUTION_S:
                _, row = heapq.heappop(free)
            else:
                row = len(free)
            heapq.heappush(free, (end, row))
            labels[index] = f"{host} #{row}"
    return pd.Series(labels, dtype=object).reindex(spans.index)


def busy_share(spans: pd.DataFrame, rows: int) -> float:
    """The trials' time over `rows` rows' time from the first start to the last end."""
    window = spans["end"].max() - spans["start"].min()
    if rows == 0 or not window > 0:
        return float("nan")
    # at most 1: spans a second apart may share a row (RESOLUTION_S) and overlap a little
    return min(1.0, float((spans["end"] - spans["start"]).sum() / (rows * window)))


def best_so_far(exp: Experiment) -> pd.DataFrame:
    """The study metric's best value over all reports up to each report time (mode min or
    max): one row per improvement, and one at the last report to carry the line on."""
    reports = _timed_reports(exp)
    if reports.empty:
        return pd.DataFrame(columns=["timestamp", "best", "trial_id"])
    values = reports[exp.metric].to_numpy()
    best = np.maximum.accumulate(values) if exp.mode == "max" else np.minimum.accumulate(values)
    improved = np.r_[True, best[1:] != best[:-1]]
    improved[-1] = True
    out = reports.assign(best=best)[improved]
    return out[["timestamp", "best", "trial_id"]].reset_index(drop=True)


def trial_bests(exp: Experiment) -> pd.DataFrame:
    """Each trial's best report of the study metric: when, its value and its iteration."""
    reports = _timed_reports(exp)
    if reports.empty:
        return pd.DataFrame(columns=["trial_id", "timestamp", exp.metric, "training_iteration"])
    by_trial = reports.groupby("trial_id", sort=False)[exp.metric]
    picks = by_trial.idxmax() if exp.mode == "max" else by_trial.idxmin()
    return reports.loc[picks, ["trial_id", "timestamp", exp.metric, "training_iteration"]]


def _timed_reports(exp: Experiment) -> pd.DataFrame:
    reports = exp.curves.dropna(subset=["timestamp", exp.metric])
    return reports.sort_values("timestamp", kind="stable").reset_index(drop=True)
