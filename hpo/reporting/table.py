"""The report's tables as HTML: the best trial's row (or the Pareto front's rows) marked by a
class that moves with the row when a click on a header sorts the table, inside a box that
scrolls (a wide config never widens the page), and a box that filters the rows."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

CSS = """
.scroll{display:inline-block;max-width:100%;max-height:75vh;overflow:auto;border:1px solid #ddd}
table.results{border-collapse:collapse;font-size:.85em;white-space:nowrap}
table.results th,table.results td{border:1px solid #ddd;padding:3px 6px;text-align:right}
table.results th{background:#eef;cursor:pointer;position:sticky;top:0}
table.results tr.best td{font-weight:bold;background:#f3f8e8}
input.filter{display:block;margin:.3em 0;padding:.3em;width:22em;max-width:100%}
"""

# Click a header to sort by it (numbers as numbers, "-" last); click again to reverse. Typing
# in a filter box hides the rows of its table that do not contain the text.
JS = """
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
document.querySelectorAll('input.filter').forEach(function (box) {
  box.addEventListener('input', function () {
    var text = box.value.toLowerCase();
    Array.from(document.getElementById(box.dataset.table).tBodies[0].rows).forEach(function (tr) {
      tr.hidden = text !== '' && tr.textContent.toLowerCase().indexOf(text) < 0;
    });
  });
});
"""


def sortable(frame: pd.DataFrame, table_id: str, best: Iterable[bool] = (),
             filter_box: bool = False) -> str:
    """`frame` as a sortable table in a scrolling box; rows where `best` is true are marked."""
    marks = list(best) + [False] * len(frame)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = [f"<tr class='best'>{_cells(r)}</tr>" if mark else f"<tr>{_cells(r)}</tr>"
            for r, mark in zip(frame.itertuples(index=False, name=None), marks, strict=False)]
    box = (f"<input class='filter' type='search' data-table='{table_id}' placeholder='filter "
           "rows: a trial id, a status, a value'>" if filter_box else "")
    start = f'<table class="results" id="{table_id}">'  # as pandas wrote it: tests read it
    return (f"{box}<div class='scroll'>{start}<thead><tr>{head}</tr></thead><tbody>\n"
            + "\n".join(rows) + "\n</tbody></table></div>")


def _cells(values: tuple[Any, ...]) -> str:
    return "".join(f"<td>{html.escape(_text(v))}</td>" for v in values)


def _text(value: Any) -> str:
    """A cell as the table shows it: 6 significant digits, "-" where there is no value."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
