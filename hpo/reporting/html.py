"""One self-contained HTML page: inline CSS, figures as PNG data URIs, a few lines of inline
JavaScript to sort the table. No server and no network: it opens from a shared file system
or a laptop alike."""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd
import yaml

from hpo.reporting.data import Experiment


@dataclass(frozen=True)
class Section:
    """One figure of the report: its id (also the PNG's name), title, PNG bytes, caption."""

    name: str
    title: str
    png: bytes
    caption: str = ""


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{margin-bottom:.2em} .meta{color:#555} pre{background:#f4f4f4;padding:.8em;overflow:auto}
.banner{background:#fff3cd;border:1px solid #e0c060;padding:.7em 1em;margin:1em 0}
figure{margin:1.5em 0} figure img{max-width:100%;border:1px solid #ddd}
figcaption{color:#555;font-size:.9em}
table.results{border-collapse:collapse;font-size:.85em;width:100%}
table.results th,table.results td{border:1px solid #ddd;padding:3px 6px;text-align:right}
table.results th{background:#eef;cursor:pointer;position:sticky;top:0}
table.results tr:first-child td{font-weight:bold}
"""

# Click a header to sort by it (numbers as numbers, "-" last); click again to reverse.
_SORT_JS = """
document.querySelectorAll('table.results th').forEach(function (th, col) {
  th.title = 'click to sort';
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0];
    var up = th.dataset.dir !== 'up'; th.dataset.dir = up ? 'up' : 'down';
    var key = function (tr) { var t = tr.cells[col].textContent.trim(), n = Number(t);
      return t === '-' ? null : (t === '' || isNaN(n) ? t : n); };
    Array.from(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      if (x === null || y === null) { return (x === null) - (y === null); }
      return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
    }).forEach(function (tr) { body.appendChild(tr); });
  });
});
"""


def page(exp: Experiment, sections: list[Section], notes: dict[str, str]) -> str:
    """The whole report as one HTML string."""
    name = html.escape(str(exp.spec.get("name", exp.path.name)))
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>hpo report: {name}</title><style>{_CSS}</style></head><body>",
             f"<h1>hpo report: {name}</h1>", _summary(exp), _banner(exp), _best(exp)]
    for section in sections:
        parts.append(_figure(section))
    parts += [f"<p class='note' id='note-{html.escape(k)}'>{html.escape(v)}</p>"
              for k, v in notes.items()]
    parts += ["<h2>All trials</h2>", _table(exp),
              f"<script>{_SORT_JS}</script></body></html>"]
    return "\n".join(parts)


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
    return title + shown.to_html(index=False, classes="results", table_id="front",
                                 na_rep="-", float_format=_number, border=0, escape=True)


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _figure(section: Section) -> str:
    data = base64.b64encode(section.png).decode("ascii")
    caption = f"<figcaption>{html.escape(section.caption)}</figcaption>" if section.caption else ""
    return (f"<h2>{html.escape(section.title)}</h2><figure id='fig-{section.name}'>"
            f"<img alt='{html.escape(section.title)}' src='data:image/png;base64,{data}'>"
            f"{caption}</figure>")


def _table(exp: Experiment) -> str:
    frame = exp.table.drop(columns=["path"], errors="ignore")
    frame.columns = [str(c).removeprefix("config/") for c in frame.columns]
    return frame.to_html(index=False, classes="results", table_id="results", na_rep="-",
                         float_format=_number, border=0, escape=True)


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.6g}"
