"""Calls the tests share: the real `hpo` CLI in a subprocess or in-process, and what an
experiment folder and the machine's processes hold afterwards."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tier_markers import check_cli_marked

SUPPORT = Path(__file__).resolve().parent  # the tests' shared helpers and trainables
ROOT = SUPPORT.parents[1]


def hpo_cli(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -m hpo ARGS` to completion and return it (text mode, both streams)."""
    check_cli_marked(args)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "hpo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


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


def is_loopback(address: str) -> bool:
    """`127.0.0.1:80`, `[::ffff:127.0.0.1]:80`, `[::1]:80` yes; `*:80`, `0.0.0.0:80` no."""
    host = address.rsplit(":", 1)[0].strip("[]").split("%")[0]
    if host in ("*", ""):
        return False
    ip = ipaddress.ip_address(host)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def build_wheel(tmp: Path) -> Path:
    # From a copy: pip builds in the source tree and would leave build/ and *.egg-info there.
    source = tmp / "src"
    for part in ("hpo", "trainables"):
        shutil.copytree(ROOT / part, source / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp / "dist"), str(source)], check=True)
    (wheel,) = (tmp / "dist").glob("hpo_hpc-*.whl")
    return wheel
