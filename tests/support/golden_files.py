"""Golden files: a rendered script compared with the one kept under tests/cluster/golden/."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

GOLDEN_WORKDIR = "/p/project/hpo"
GOLDEN_VENV = f"{GOLDEN_WORKDIR}/.venv"


def with_golden_venv(text: str, rendered_in: Path) -> str:
    """A rendered script with this test run's venv (the default slurm.venv: the environment
    that renders) shown as the golden files' /p/project/hpo/.venv, and the folder it was
    rendered in as /p/project/hpo (where a path below it is absolute)."""
    text = text.replace(sys.prefix, GOLDEN_VENV)
    for folder in {str(rendered_in), os.path.realpath(rendered_in)}:
        text = text.replace(f"{folder}/", f"{GOLDEN_WORKDIR}/")
    return text


def check_golden(golden: Path, text: str, regenerate: str) -> None:
    """Compare rendered text with its golden file (HPO_REGENERATE_GOLDEN=1 rewrites it); on a
    difference, fail with the changed lines and the command that regenerates it."""
    import difflib

    if os.environ.get("HPO_REGENERATE_GOLDEN"):
        golden.write_text(text)
    expected = golden.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            str(golden), "rendered now"))
        pytest.fail(f"{golden} changed:\n{diff}\nIf the change is intended, regenerate the "
                    f"golden file: {regenerate}")
