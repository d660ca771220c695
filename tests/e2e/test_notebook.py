"""A real notebook, run headless (nbclient, a real ipykernel): a trainable defined in a cell
is tuned twice on the one embedded Ray the first run started, then hpo.shutdown() ends it;
Rich's live view must not break the kernel (ipywidgets is optional)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="pip install -e .[test]")
nbclient = pytest.importorskip("nbclient", reason="pip install -e .[test]")

pytestmark = pytest.mark.slow
NOTEBOOK = Path(__file__).with_name("notebooks") / "tune_in_a_cell.ipynb"
ROOT = Path(__file__).resolve().parents[2]


def _text(cell: dict, kind: str = "execute_result", mime: str = "text/plain") -> str:
    """A cell's outputs of one kind (stream: what it printed)."""
    outs = [o for o in cell.get("outputs", []) if o["output_type"] == kind]
    return "".join(o.get("text", "") if kind == "stream" else o["data"].get(mime, "")
                   for o in outs)


def test_a_notebook_tunes_a_cell_function_twice_on_one_ray(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    os.environ["HPO_NOTEBOOK_STORAGE"] = str(tmp_path)  # the kernel inherits it
    try:
        nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT)}}).execute()
    finally:
        del os.environ["HPO_NOTEBOOK_STORAGE"]
    cells = [c for c in notebook.cells if c.cell_type == "code"]
    assert _text(cells[2]) == "{'x': 2}"  # hpo.run returned its result object
    # Rich's live view draws into an ipywidgets Output when it is installed; without it hpo
    # prints plain frames (Rich alone would warn once and draw nothing)
    assert "Traceback" not in json.dumps([c.outputs for c in cells])
    shown = _text(cells[2], "stream") + json.dumps(cells[2].outputs)
    assert re.search(r"\d+/\d+ trials", shown), "the progress view drew nothing"
    timing = re.search(r"first run ([\d.]+) s, second run ([\d.]+) s",
                       _text(cells[3], "stream"))
    assert timing, cells[3].outputs
    assert "6.0" in _text(cells[3])  # 2 * 2 * data.sum(): the object reached the trials
    assert _text(cells[4]) == "False"  # hpo.shutdown() ended the kept Ray
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cell", "cell-data"]
    print(f"first run {timing[1]} s, second (Ray kept) {timing[2]} s")
