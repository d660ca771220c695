"""Reading what a report run left: a page rendered by headless Chromium (and probed by a
script run in it), TensorBoard files; an experiment folder of many trials written directly."""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

# Chromium's log line for a page's console message, e.g.
# [1:1:1121/111825.3:INFO:CONSOLE:1] "Uncaught ReferenceError: f is not defined", source: ...
_CONSOLE = re.compile(r":(INFO|WARNING|ERROR|VERBOSE\d*):CONSOLE[^\]]*\] (.*)")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    pytest.fail("headless Chromium is needed: `bash scripts/setup.sh --test` installs it")


def _headless(page: Path, *args: str, window: str = "1200,2400") -> subprocess.CompletedProcess:
    """One Chromium run on a fresh profile (no state shared between runs or users)."""
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
             f"--window-size={window}", *args, page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120)


def _console_errors(stderr: str) -> list[str]:
    """Errors, and loads the page's Content-Security-Policy blocked (logged as INFO)."""
    return [m.group(2) for line in stderr.splitlines()
            if (m := _CONSOLE.search(line)) and (m.group(1) == "ERROR" or "Uncaught" in line
                                                  or "Error" in m.group(2)
                                                  or "Content Security Policy" in m.group(2))]


def chromium_render(page: Path, tmp_path: Path) -> tuple[list[str], str, np.ndarray]:
    """(console errors, DOM after the scripts ran, screenshot pixels in [0, 1]) of a page."""
    import matplotlib.pyplot as plt

    shot = tmp_path / f"{page.stem}-screenshot.png"
    run = _headless(page, f"--screenshot={shot}")
    assert shot.is_file(), run.stderr[-2000:]
    dump = _headless(page, "--dump-dom")
    return _console_errors(run.stderr + dump.stderr), dump.stdout, plt.imread(shot)[..., :3]


# What a person does on a report, done by a script appended to a copy of the page: it waits for
# the plots, reads what they drew, opens the metric menu and picks `metric`, sorts the table
# by `sort` (one click: ascending), filters it for the best trial's id, saves a PNG through
# plotly, and lists every resource the page fetched. Its findings land as JSON in
# <pre id="probe"> for --dump-dom.
PROBE_JS = r"""
(async function () {
  const out = {}, sleep = ms => new Promise(r => setTimeout(r, ms));
  async function waitFor(f) { for (let i = 0; i < 200; i++) { const v = f(); if (v) return v;
    await sleep(50); } return null; }
  const weight = el => Number(getComputedStyle(el).fontWeight);
  try {
    await waitFor(() => document.readyState === 'complete');
    const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
    await waitFor(() => plots.every(gd => gd._fullLayout && gd.querySelector('svg.main-svg')));
    out.plots = Object.fromEntries(plots.map(gd => [gd.id, {
      svgs: gd.querySelectorAll('svg.main-svg').length, traces: gd.data.length,
      drawn: gd.querySelectorAll('.scatterlayer path.js-line, .scatterlayer path.point, '
        + '.barlayer path').length}]));
    const timeline = document.getElementById('plot-timeline');
    if (timeline) {
      out.bars = timeline.querySelectorAll('.barlayer .point path').length;
      out.barTrials = timeline.data.flatMap(t => Array.from(t.customdata, c => c[0]));
    }
    const curves = document.getElementById('plot-learning_curves');
    out.before = {y: Array.from(curves.data[0].y), title: curves.layout.yaxis.title.text,
      d: curves.querySelector('.scatterlayer path.js-line').getAttribute('d')};
    if (PROBE.metric) {
      (await waitFor(() => curves.querySelector('.updatemenu-header')))
        .dispatchEvent(new MouseEvent('click', {bubbles: true}));
      const items = await waitFor(() => { const b = Array.from(
        curves.querySelectorAll('.updatemenu-dropdown-button')); return b.length ? b : null; });
      out.menu = items.map(b => b.textContent);
      items[out.menu.indexOf(PROBE.metric)].dispatchEvent(new MouseEvent('click', {bubbles: true}));
      await waitFor(() => curves.layout.yaxis.title.text === PROBE.metric);
      await sleep(100);
      out.after = {y: Array.from(curves.data[0].y), title: curves.layout.yaxis.title.text,
        d: curves.querySelector('.scatterlayer path.js-line').getAttribute('d')};
    }
    const table = document.getElementById('results');
    const heads = Array.from(table.tHead.rows[0].cells).map(th => th.textContent);
    const bestId = () => table.querySelector('tr.best').cells[0].textContent;
    out.table = {best: bestId(), firstRow: table.tBodies[0].rows[0].cells[0].textContent};
    table.tHead.rows[0].cells[heads.indexOf(PROBE.sort)].click();
    const rows = Array.from(table.tBodies[0].rows), best = table.querySelector('tr.best');
    out.sorted = {best: bestId(), bestAt: rows.indexOf(best), rows: rows.length,
      column: rows.map(tr => tr.cells[heads.indexOf(PROBE.sort)].textContent),
      bestWeight: weight(best.cells[0]),
      otherWeights: rows.filter(tr => tr !== best).map(tr => weight(tr.cells[0]))};
    const filter = document.querySelector('input.filter');
    filter.value = out.table.best;
    filter.dispatchEvent(new Event('input'));
    out.filtered = rows.filter(tr => !tr.hidden).map(tr => tr.cells[0].textContent);
    filter.value = '';
    filter.dispatchEvent(new Event('input'));
    const box = table.closest('.scroll');
    out.width = {page: document.documentElement.scrollWidth,
      window: document.documentElement.clientWidth, box: box.clientWidth,
      table: table.scrollWidth};
    out.png = (await Plotly.toImage(curves, {format: 'png', width: 400, height: 300}))
      .slice(0, 22);
    out.resources = performance.getEntriesByType('resource').map(e => e.name);
    out.elapsed_ms = performance.now();
  } catch (e) { out.error = String(e && e.stack || e); }
  document.getElementById('probe').textContent = JSON.stringify(out);
})();
"""


def chromium_probe(page: Path, tmp_path: Path, window: str = "1200,2400",
                   **settings: Any) -> tuple[list[str], dict[str, Any], float]:
    """(console errors, PROBE_JS's findings, seconds Chromium ran) on a copy of `page` with
    the probe appended; `settings` (metric, sort) reach the probe as PROBE."""
    text = page.read_text(encoding="utf-8")
    probe = (f"<pre id='probe'></pre><script>var PROBE = {json.dumps(settings)};"
             f"{PROBE_JS}</script>")
    copy = tmp_path / f"{page.stem}-probed.html"
    copy.write_text(text.replace("</body>", probe + "</body>"), encoding="utf-8")
    start = time.monotonic()
    dump = _headless(copy, "--dump-dom", "--virtual-time-budget=30000", window=window)
    elapsed = time.monotonic() - start
    found = re.search(r'<pre id="probe">(.*?)</pre>', dump.stdout, re.S)
    assert found and found.group(1), dump.stderr[-3000:]
    return _console_errors(dump.stderr), json.loads(html.unescape(found.group(1))), elapsed


def without_plotly_js(page: str) -> str:
    """The page less its inline plotly.js bundle (plotly's own text, URLs in comments and
    map styles included: none of it is fetched by the figures the report draws)."""
    return re.sub(r"<script id='plotly-js'>.*?</script>", "", page, count=1, flags=re.S)


def write_experiment(root: Path, trials: int, iterations: int, hosts: int = 4,
                     slots: int = 8) -> Path:
    """An experiment folder as `hpo run` leaves one (hpo-spec.yaml, Tune's snapshot, a
    result.json per trial), written directly: `trials` trials of `iterations` reports each,
    run `slots` at a time on each of `hosts` nodes; better x and lr give a higher `acc`."""
    spec = {"name": "big", "trainable": "tests/support/study_trainables.py:steady", "metric": "acc",
            "mode": "max", "search_space": {"lr": {"loguniform": [1e-4, 1e-1]},
                                            "layers": {"choice": [1, 2, 3]}},
            "scheduler": {"type": "fifo"}}
    exp = root / "big"
    exp.mkdir(parents=True)
    (exp / "hpo-spec.yaml").write_text(yaml.safe_dump(spec))
    rng = np.random.default_rng(0)
    state = []
    for i in range(trials):
        trial_id, folder = f"big_{i:05d}", f"trial_{i:05d}"
        config = {"lr": float(10 ** rng.uniform(-4, -1)), "layers": int(rng.integers(1, 4))}
        host, slot_round = f"node{i % hosts}", i // (hosts * slots)
        start = 1.7e9 + slot_round * (iterations * 10 + 5)
        quality = -abs(math.log10(config["lr"]) + 2.5) + config["layers"] / 3
        (exp / folder).mkdir()
        (exp / folder / "result.json").write_text("".join(json.dumps({
            "acc": quality + it / iterations, "loss": 1 / it - quality, "training_iteration": it,
            "timestamp": int(start + 10 * it), "time_since_restore": 10.0 * it,
            "hostname": host, "config": config}) + "\n" for it in range(1, iterations + 1)))
        state.append([json.dumps({"trial_id": trial_id, "status": "TERMINATED",
                                  "config": config, "relative_logdir": folder}), "{}"])
    (exp / "experiment_state-x.json").write_text(json.dumps({"trial_data": state}))
    return exp


def tensorboard_events(trial_dir: Path) -> Iterator[Any]:
    """Every Event of a trial's events files, file by file (TFRecord framing)."""
    from tensorboardX.proto.event_pb2 import Event

    for path in sorted(trial_dir.glob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            yield Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4  # length, its crc, the record, its crc


def tensorboard_scalars(trial_dir: Path, tag: str) -> dict[int, float]:
    """step -> value of one scalar over all events files of a trial."""
    values: dict[int, float] = {}
    for event in tensorboard_events(trial_dir):
        for value in event.summary.value:
            if value.tag == tag:
                values[event.step] = value.simple_value
    return dict(sorted(values.items()))
