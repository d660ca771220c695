"""`hpo --help` shows flags as flags: no `<bool>` value after --debug or --version (typer 0.29
prints one for every bool option unless its metavar is blank)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from calls import ROOT


def _help_line(text: str, option: str) -> str:
    lines = [ln for ln in text.splitlines() if f" {option} " in ln]
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize("flag", ["--debug", "--version"])
def test_help_shows_flags_without_a_value(flag: str) -> None:
    env = {**os.environ, "COLUMNS": "120", "TERM": "dumb"}
    done = subprocess.run([sys.executable, "-m", "hpo", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    line = _help_line(done.stdout, flag)
    assert "<bool>" not in line, line
    assert "Show tracebacks." in done.stdout  # the help text itself is still there


def test_debug_is_still_a_flag() -> None:
    """--debug takes no value: the word after it is the command, and the traceback shows."""
    done = subprocess.run([sys.executable, "-m", "hpo", "--debug", "validate",
                           "/nonexistent/space.yaml"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" in done.stderr and "error:" in done.stderr, done.stderr
