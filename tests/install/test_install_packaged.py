"""The Horovod installer ships with the package: hpo's wheel, installed into a fresh venv (no
checkout on its path, run from elsewhere), has `hpo install horovod` and `python -m
hpo.install`, which find their code inside the installed package and decide this machine's
build, and refuse a bad request in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from calls import build_wheel

ROOT = Path(__file__).resolve().parents[2]
# slow: the tests build hpo's wheel and install it into a fresh venv
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding only hpo's wheel; this venv's packages (torch, typer...) are reachable
    through a .pth line placed after its own site-packages. (`--system-site-packages` would
    reach the base interpreter's, not this venv's.)"""
    tmp = tmp_path_factory.mktemp("packaged")
    wheel = build_wheel(tmp)
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("install/__main__.py", "install/horovod/install.py",
                   "install/horovod/cuda_wheels.py", "cli/install.py"):
        assert f"hpo/{module}" in names, module
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")],
                   check=True)
    python = tmp / "venv" / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "zz-parent-venv.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", str(wheel)], check=True)
    return tmp / "venv"


def _run(venv: Path, cwd: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HPO_HOROVOD_LOG"] = str(cwd / "build.log")
    return subprocess.run([str(venv / "bin" / command[0]), *command[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_installed_hpo_probes_the_horovod_build(venv: Path, tmp_path: Path) -> None:
    where = _run(venv, tmp_path, "python", "-c",
                 "import hpo.install.horovod.install as m; print(m.__file__)")
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
    for command in (("hpo", "install", "horovod", "--probe"),
                    ("python", "-m", "hpo.install", "horovod", "--probe")):
        done = _run(venv, tmp_path, *command)
        assert done.returncode == 0, done.stderr
        decision = json.loads(done.stdout)["decision"]
        assert decision["key"].startswith("horovod0.28.1-torch") and "env" in decision
    assert not (tmp_path / "build").exists()  # --probe builds nothing


def test_the_installed_hpo_refuses_a_bad_request_in_one_line(venv: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    request = ("--cuda", "99") if torch.version.cuda else ("--cuda",)
    done = _run(venv, tmp_path, "hpo", "install", "horovod", *request)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "--cuda" in done.stderr and "hpo install horovod:" in done.stderr
