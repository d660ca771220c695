"""Shared helpers: run the real `hpo` CLI in a subprocess, read an experiment's trials."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tier_markers import _ray_marker_kept, check_cli_marked, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parent.parent
__all__ = ["_ray_marker_kept", "pytest_collection_modifyitems"]  # the tiers' markers
# A warm Ray a developer keeps up (`hpo local up`) is not the tests' to use: they get none
# unless they start their own (tests/test_warm_ray.py).
os.environ["HPO_LOCAL_RAY"] = str(Path(os.environ.get("TMPDIR", "/tmp")) /
                                  f"hpo-tests-no-warm-ray-{os.getpid()}")


def hpo_cli(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -m hpo ARGS` to completion and return it (text mode, both streams)."""
    check_cli_marked(args)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "hpo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    return tmp_path / "results"


def trial_rows(exp_dir: Path) -> dict[str, list[dict]]:
    """Every result each trial reported, read from its result.json, keyed by trial folder."""
    import json

    return {
        result.parent.name: [json.loads(line) for line in result.read_text().splitlines()
                             if line.strip()]
        for result in sorted(exp_dir.glob("*/result.json"))
    }


def command_lines() -> list[str]:
    """The command line of every process on this machine, read from /proc."""
    lines = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:  # the process ended meanwhile
            continue
    return lines


@pytest.fixture(autouse=True, scope="session")
def _no_warm_ray_left() -> Iterator[None]:
    """A test that started a warm Ray in the tests' own folder and failed to stop it: stopped
    at the end, not left running (later runs would connect to it)."""
    yield
    from hpo.cluster import warm

    warm.down()


@pytest.fixture(autouse=True, scope="module")
def _no_ray_left_between_modules() -> Iterator[None]:
    """`hpo.run` from Python keeps its embedded Ray for the next run (as in a notebook): end it
    after each test module, so a later module starts from a machine without a Ray."""
    yield
    import hpo

    hpo.shutdown()


def cli_invoke(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The CLI in-process (typer's runner keeps stdout and stderr apart): exit code, out, err.
    A crash (an exception other than the CLI's own exit) fails the test."""
    from typer.testing import CliRunner

    from hpo.cli import app

    check_cli_marked(tuple(args))
    result = CliRunner().invoke(app, args, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"CLI crashed: {result.exception!r}")
    return result.exit_code, result.stdout, result.stderr


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
