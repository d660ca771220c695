"""The Python API page's examples (docs/python-api.md), as written: each code block is a
complete script; all run in one fresh Python process (each block in its own namespace, as
`__main__`, as a script's functions are), which also shows the embedded Ray kept from one run
to the next. README shows the first one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/python-api.md"
RUNNER = """
import sys, time
for number, code in enumerate(BLOCKS, 1):
    start = time.perf_counter()
    exec(compile(code, f"docs/python-api.md block {number}", "exec"), {"__name__": "__main__"})
    print(f"== block {number} took {time.perf_counter() - start:.1f} s", flush=True)
"""


def python_api_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_page_has_an_example_per_form() -> None:
    blocks = python_api_blocks()
    assert len(blocks) == 4
    assert "trainable=train" in blocks[0] and "tune.Trainable" in blocks[1]
    assert "parameters=" in blocks[2] and "callbacks=" in blocks[3]


def test_the_readme_shows_the_first_example_as_it_runs_here() -> None:
    readme = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert readme == [python_api_blocks()[0].split("print(result.dataframe")[0]]


@pytest.mark.slow
def test_the_examples_run(tmp_path: Path) -> None:
    script = f"BLOCKS = {python_api_blocks()!r}\n{RUNNER}"
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.name for p in sorted((tmp_path / "hpo-results").iterdir())] == [
        "climb", "lstsq", "quadratic", "watched"]
    assert re.search(r"{'lr': 0\.\d+}", done.stdout)  # best configs printed
    assert "loss 4.0000" in done.stdout  # the callback saw x=2's result
    print(re.findall(r"== block \d took [\d.]+ s", done.stdout))
