"""The report's interactive figures (plotly: hover, zoom, a click on a legend entry hides a
trial or a group, the camera button saves a PNG): learning curves with a choice of metric,
the best metric so far over wall time, and the trials on a timeline per node.

Each function returns a Figure, or None when the experiment has nothing to show in it.
`div` turns one into HTML for the page, which carries plotly.js once (`PLOTLY_JS`): the page
needs no network.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import sample_colorscale

from hpo.reporting.data import UNFINISHED, Experiment, cut_trials
from hpo.reporting.walltime import best_so_far, busy_share, lanes, trial_bests, trial_spans

CURVES_MAX = 50  # as the PNG: the best 50 trials as lines, the others as one band
METRICS_MAX = 20  # metrics offered in the learning curves' menu (each one's data is inline)
_TEMPLATE = "plotly_white"
_ENDS = (("cut", "stopped by the scheduler", {"symbol": "x-thin", "size": 10,
                                              "line": {"width": 2, "color": "black"}}),
         ("ERROR", "failed", {"symbol": "x", "size": 10, "color": "red"}),
         ("RUNNING", "still running", {"symbol": "circle-open", "size": 9, "color": "black"}))
_STATUS_COLORS = {"TERMINATED": "#3b7dd8", "ERROR": "#d62728", "RUNNING": "#ff7f0e",
                  "PENDING": "#ff7f0e", "PAUSED": "#999999"}


def div(figure: go.Figure, name: str) -> str:
    """The figure as a <div> and its script, for a page that already loaded plotly.js."""
    config = {"displaylogo": False, "responsive": True,
              "toImageButtonOptions": {"format": "png", "scale": 3, "filename": name}}
    return pio.to_html(figure, include_plotlyjs=False, full_html=False, div_id=f"plot-{name}",
                       config=config, default_height=figure.layout.height or 480)


def plotly_js() -> str:
    """plotly.js itself (about 4.8 MB), for one inline <script> per page."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def learning_curves(exp: Experiment, drawn: int = CURVES_MAX) -> go.Figure:
    """The best `drawn` trials' curves (the study metric's ranking), the others as a band of
    their range per iteration; a menu switches every trace to another reported metric."""
    ids = list(exp.table["trial_id"])
    top = ids[:drawn]
    metrics = list(exp.reported_metrics[:METRICS_MAX]) or [exp.metric]
    traces = {metric: _curve_traces(exp, metric, top) for metric in metrics}
    fig = go.Figure(layout={"template": _TEMPLATE, "height": 540})
    colors = _colors(len(top), len(ids))
    for rank, (trial_id, trace) in enumerate(zip(top, traces[exp.metric], strict=False)):
        fig.add_scatter(**trace, name=trial_id, mode="lines+markers", marker={"size": 4},
                        line={"color": colors[rank], "width": 3 if rank == 0 else 1.4})
    for (_, label, marker), trace in zip(_ENDS, traces[exp.metric][len(top):], strict=False):
        fig.add_scatter(**trace, name=label, mode="markers", marker=marker,
                        showlegend=bool(trace["x"]))
    rest = len(ids) - len(top)
    fig.add_scatter(**traces[exp.metric][-1], name=f"the other {rest} trials: range",
                    fill="toself", mode="lines", hoveron="fills", visible=rest > 0,
                    line={"color": "rgba(128,128,128,0.6)", "width": 1},
                    fillcolor="rgba(128,128,128,0.3)")
    shown = f"best {len(top)} of {len(ids)} drawn" if rest else f"{len(ids)} trials"
    fig.update_layout(title=f"Learning curves ({shown} by {exp.metric}, best drawn thick)",
                      xaxis_title="training iteration", yaxis_title=exp.metric,
                      legend={"title": {"text": "click: hide, double-click: only it"},
                              "font": {"size": 10}}, margin={"t": 90})
    if len(metrics) > 1:
        fig.update_layout(updatemenus=[_metric_menu(traces)])
    return fig


def _curve_traces(exp: Experiment, metric: str, top: list[str]) -> list[dict[str, Any]]:
    """x, y (and hover text) of every trace for one metric: a line per top trial, a marker
    trace per kind of end (_ENDS), the band of the others."""
    reports = exp.curves.dropna(subset=[metric])
    drawn = reports["trial_id"].isin(top)
    # Split only the drawn trials' reports: a frame per trial took minutes at 10,000 trials.
    curves = dict(tuple(reports[drawn].groupby("trial_id", sort=False)))
    lines = [_xy(curves.get(trial_id), metric) for trial_id in top]
    lines = [{**line, "hovertemplate": f"<b>%{{fullData.name}}</b><br>iteration %{{x}}<br>"
              f"{metric} %{{y:.6g}}<extra></extra>"} for line in lines]
    ends = _end_points(exp, curves, metric)
    return [*lines, *ends, _band(reports[~drawn], metric)]


def _xy(curve: pd.DataFrame | None, metric: str) -> dict[str, Any]:
    if curve is None:
        return {"x": [], "y": []}
    return {"x": curve["training_iteration"].tolist(), "y": curve[metric].tolist()}


def _end_points(exp: Experiment, curves: dict[str, pd.DataFrame],
                metric: str) -> list[dict[str, Any]]:
    """The last report of each drawn trial the scheduler cut, that failed, or still runs."""
    status = dict(zip(exp.table["trial_id"], exp.table["status"], strict=True))
    cut = set(cut_trials(exp))
    kinds = {"cut": lambda t: t in cut and status[t] != "ERROR",
             "ERROR": lambda t: status[t] == "ERROR",
             "RUNNING": lambda t: status[t] in UNFINISHED}
    out = []
    for kind, _, _ in _ENDS:
        lasts = [(t, c.iloc[-1]) for t, c in curves.items() if kinds[kind](t)]
        out.append({"x": [row["training_iteration"] for _, row in lasts],
                    "y": [row[metric] for _, row in lasts], "text": [t for t, _ in lasts],
                    "hovertemplate": f"<b>%{{text}}</b>: %{{fullData.name}}<br>iteration "
                    f"%{{x}}<br>{metric} %{{y:.6g}}<extra></extra>"})
    return out


def _band(reports: pd.DataFrame, metric: str) -> dict[str, Any]:
    """The trials not drawn: one polygon from their max per iteration back along their min."""
    span = reports.groupby("training_iteration")[metric].agg(["min", "max"])
    x = [*span.index, *span.index[::-1]]
    return {"x": x, "y": [*span["max"], *span["min"][::-1]], "hovertemplate": None}


def _metric_menu(traces: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A dropdown that restyles every trace's data (and the y title) to one metric."""
    keys = ("x", "y", "text", "hovertemplate")
    buttons = [{"label": metric, "method": "update",
                "args": [{key: [trace.get(key) for trace in data] for key in keys},
                         {"yaxis.title.text": metric}]} for metric, data in traces.items()]
    return {"buttons": buttons, "direction": "down", "showactive": True, "active": 0,
            "x": 1, "xanchor": "right", "y": 1.02, "yanchor": "bottom", "name": "metric"}


def _colors(count: int, trials: int) -> list[str]:
    """The colours of the best `count` of `trials` trials by rank, as in the PNGs (viridis,
    bright is good)."""
    return sample_colorscale("Viridis", [1 - i / max(trials - 1, 1) * 0.9 for i in range(count)])


def best_over_time(exp: Experiment) -> go.Figure | None:
    """Each trial's best report of the study metric at its time, and the best so far."""
    points, best = trial_bests(exp), best_so_far(exp)
    if best.empty:
        return None
    fig = go.Figure(layout={"template": _TEMPLATE, "height": 460})
    fig.add_scatter(x=_clock(points["timestamp"]), y=points[exp.metric], mode="markers",
                    name="each trial's best report", text=points["trial_id"],
                    customdata=points["training_iteration"], marker={"color": "grey", "size": 6},
                    hovertemplate=f"<b>%{{text}}</b><br>iteration %{{customdata}}<br>"
                    f"{exp.metric} %{{y:.6g}}<br>%{{x}}<extra></extra>")
    fig.add_scatter(x=_clock(best["timestamp"]), y=best["best"], mode="lines",
                    name="best so far", line={"color": "#d62728", "width": 2.5, "shape": "hv"},
                    text=best["trial_id"], hovertemplate="best so far %{y:.6g} "
                    "(%{text})<br>%{x}<extra></extra>")
    fig.update_layout(title=f"Best {exp.metric} so far ({exp.mode}) over wall time",
                      xaxis_title="wall time", yaxis_title=exp.metric)
    return fig


def timeline(exp: Experiment) -> go.Figure | None:
    """One bar per trial from its start to its last report, on rows per node (as many as its
    trials overlapped): gaps are idle slots. Bars coloured by status."""
    spans = trial_spans(exp)
    if spans.empty:
        return None
    spans["lane"] = lanes(spans)
    rows = sorted(spans["lane"].unique(), key=_lane_key)
    fig = go.Figure(layout={"template": _TEMPLATE, "height": min(200 + 26 * len(rows), 1400)})
    for status, group in spans.groupby("status", sort=False):
        fig.add_bar(**_bars(group), name=status.lower(), orientation="h",
                    marker={"color": _STATUS_COLORS.get(status, "#555555")})
    share = busy_share(spans, len(rows))
    fig.update_layout(
        title=f"Trials over wall time: {len(spans)} trials on {spans['hostname'].nunique()} "
              f"node(s), {len(rows)} row(s), busy {share:.0%} of the rows' time",
        barmode="overlay", xaxis={"type": "date", "title": "wall time"},
        yaxis={"categoryorder": "array", "categoryarray": rows, "autorange": "reversed",
               "title": "node #row", "dtick": 1 if len(rows) <= 40 else None}, bargap=0.25)
    return fig


def _bars(spans: pd.DataFrame) -> dict[str, Any]:
    seconds = (spans["end"] - spans["start"]).clip(lower=0.001)
    start, end = _clock(spans["start"]), _clock(spans["end"])
    return {"y": spans["lane"].tolist(), "x": (seconds * 1000).round().tolist(), "base": start,
            "customdata": np.stack([spans["trial_id"], start, end, seconds.round(1)], axis=-1),
            "hovertemplate": "<b>%{customdata[0]}</b><br>%{customdata[1]} to %{customdata[2]}"
                             "<br>%{customdata[3]} s<extra>%{fullData.name}</extra>"}


def _lane_key(lane: str) -> tuple[str, int]:
    host, _, row = lane.rpartition(" #")
    return host, int(row)


def _clock(seconds: pd.Series) -> list[str]:
    """UNIX seconds as this machine's local clock time, as plotly reads dates."""
    zone = datetime.now().astimezone().tzinfo
    stamps = pd.to_datetime(seconds.astype(float), unit="s", utc=True).dt.tz_convert(zone)
    return stamps.dt.strftime("%Y-%m-%d %H:%M:%S.%f").str[:-3].tolist()
