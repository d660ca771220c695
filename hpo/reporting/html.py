"""One self-contained HTML page: inline CSS, interactive figures with plotly.js inline (once),
the others as PNG data URIs, a few lines of inline JavaScript for the table. No server and no
network: it opens from a shared file system or a laptop alike, and its Content-Security-Policy
lets the browser load nothing from anywhere."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd
import yaml

from hpo.reporting.data import Experiment
from hpo.reporting.interactive import plotly_js
from hpo.reporting.table import CSS as TABLE_CSS
from hpo.reporting.table import JS as TABLE_JS
from hpo.reporting.table import sortable


@dataclass(frozen=True)
class Section:
    """One figure of the report: its id (also the PNG's name), title, PNG bytes (written to the
    figures folder), caption, and its interactive version (shown instead of the PNG)."""

    name: str
    title: str
    png: bytes = b""
    caption: str = ""
    plot: str = ""


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{margin-bottom:.2em} .meta{color:#555;overflow-wrap:anywhere}
pre{background:#f4f4f4;padding:.8em;overflow:auto}
.banner{background:#fff3cd;border:1px solid #e0c060;padding:.7em 1em;margin:1em 0}
figure{margin:1.5em 0} figure img{max-width:100%;border:1px solid #ddd}
figcaption{color:#555;font-size:.9em}
""" + TABLE_CSS
# Nothing but this page's own inline code and data: no script, style, font or image from a
# file or a server (an offline page stays offline; a broken one says so in the console).
_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "img-src data: blob:; font-src data:")


def page(exp: Experiment, sections: list[Section], notes: dict[str, str]) -> str:
    """The whole report as one HTML string."""
    name = html.escape(str(exp.spec.get("name", exp.path.name)))
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<meta http-equiv='Content-Security-Policy' content=\"{_CSP}\">"
             f"<title>hpo report: {name}</title><style>{_CSS}</style>{_plotly(sections)}"
             "</head><body>", f"<h1>hpo report: {name}</h1>", _summary(exp), _banner(exp),
             _best(exp)]
    for section in sections:
        parts.append(_figure(section))
    parts += [f"<p class='note' id='note-{html.escape(k)}'>{html.escape(v)}</p>"
              for k, v in notes.items()]
    parts += ["<h2>All trials</h2>", _table(exp),
              f"<script>{TABLE_JS}</script></body></html>"]
    return "\n".join(parts)


def _plotly(sections: list[Section]) -> str:
    """plotly.js inline, once, if a figure needs it."""
    if not any(section.plot for section in sections):
        return ""
    return f"<script id='plotly-js'>{plotly_js()}</script>"


def _summary(exp: Experiment) -> str:
    counts = exp.table["status"].str.lower().value_counts()
    states = ", ".join(f"{n} {s}" for s, n in counts.items())
    search = (exp.spec.get("search") or {}).get("type", "random")
    return (f"<p class='meta'>{len(exp.table)} trials ({states}) &middot; scheduler "
            f"{html.escape(exp.scheduler['type'])} &middot; search {html.escape(search)} "
            f"&middot; {_objectives(exp)}<br>"
            f"folder {html.escape(str(exp.path))} &middot; report made "
            f"{datetime.now().isoformat(timespec='seconds')}</p>")


def _objectives(exp: Experiment) -> str:
    said = ", ".join(f"<b>{html.escape(metric)}</b> ({mode})" for metric, mode in exp.objectives)
    return f"objectives {said}" if len(exp.objectives) > 1 else f"metric {said}"


def _banner(exp: Experiment) -> str:
    if not exp.unfinished:
        return ""
    return (f"<div class='banner' id='running'><b>Running:</b> {exp.unfinished} trial(s) were "
            "unfinished in the latest snapshot, so this report is a snapshot too. Make it again "
            "for an update; if the run was interrupted, <code>hpo resume "
            f"{html.escape(str(exp.path))}</code> continues it.</div>")


def _best(exp: Experiment) -> str:
    if len(exp.objectives) > 1:
        return _front(exp)
    best = exp.table.iloc[0]
    value = best[f"best_{exp.metric}"]
    if pd.isna(value):
        return "<h2>Best trial</h2><p>No trial has reported the metric yet.</p>"
    config = {str(k).removeprefix("config/"): _plain(v) for k, v in best.items()
              if str(k).startswith("config/")}
    text = yaml.safe_dump(config, sort_keys=False)
    return (f"<h2>Best trial</h2><p id='best'>Trial <b>{html.escape(best['trial_id'])}</b>: "
            f"best {html.escape(exp.metric)} <b>{value:.6g}</b> after {best['iterations']} "
            f"iteration(s).</p><pre>{html.escape(text)}</pre>")


def _front(exp: Experiment) -> str:
    """The Pareto front's trials: their objectives' last values and their configs."""
    table = exp.table
    front = table[table["pareto_front"].astype(bool)]
    finished = int(table["status"].eq("TERMINATED").sum())
    title = f"<h2>Pareto front ({len(front)} of {finished} finished trials)</h2>"
    if front.empty:
        return title + "<p>No finished trial has reported every objective yet.</p>"
    metrics = [metric for metric, _ in exp.objectives]
    configs = [c for c in table.columns if str(c).startswith("config/")]
    shown = front[["trial_id", *(f"last_{m}" for m in metrics), *configs]]
    shown.columns = ["trial_id", *metrics, *(str(c).removeprefix("config/") for c in configs)]
    return title + sortable(shown, "front")


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _figure(section: Section) -> str:
    caption = f"<figcaption>{html.escape(section.caption)}</figcaption>" if section.caption else ""
    if section.plot:
        body = section.plot
    else:
        data = base64.b64encode(section.png).decode("ascii")
        body = f"<img alt='{html.escape(section.title)}' src='data:image/png;base64,{data}'>"
    return (f"<h2>{html.escape(section.title)}</h2><figure id='fig-{section.name}'>{body}"
            f"{caption}</figure>")


def _table(exp: Experiment) -> str:
    """Every trial; bold: the best (several objectives: the Pareto front), wherever a sort
    puts it."""
    frame = exp.table.drop(columns=["path"], errors="ignore")
    frame.columns = [str(c).removeprefix("config/") for c in frame.columns]
    if "pareto_front" in exp.table:
        best = exp.table["pareto_front"].astype(bool).tolist()
    else:
        best = [pd.notna(exp.table.iloc[0][f"best_{exp.metric}"])]
    return sortable(frame, "results", best, filter_box=True)
