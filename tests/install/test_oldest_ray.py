"""The oldest Ray of the supported range runs hpo: a venv of its own holds that Ray, layered
over this environment for everything else (torch, optuna, pandas ... and hpo from this tree),
and runs the smoke set: `hpo doctor`, a run stopped by a signal, its exact resume.

The Ray wheel is cached beside the Horovod wheels (HPO_WHEEL_CACHE, default
~/.cache/hpo/wheels/ray-RELEASE/): downloaded once, then offline. Without the cache and the
network the test is skipped naming both; under CI (CI set) it fails instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from calls import ROOT, SUPPORT
from exact_histories import assert_exact

from hpo.install.horovod.cache import cache_root
from hpo.ray_adapters.registry import OLDEST_RAY, PATCHES

pytestmark = pytest.mark.slow

RELEASE = "2.58.1"  # the last release of the oldest minor hpo supports


def test_the_release_is_of_the_oldest_minor() -> None:
    assert tuple(int(part) for part in RELEASE.split(".")[:2]) == OLDEST_RAY


def _wheel() -> Path:
    """Ray RELEASE's wheel for this Python, from the cache or downloaded into it (the folder
    appears whole: downloaded beside it, then renamed)."""
    folder = cache_root() / f"ray-{RELEASE}"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    found = sorted(folder.glob(f"ray-{RELEASE}-{tag}-*.whl"))
    if found:
        return found[0]
    folder.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".ray-{RELEASE}-", dir=folder.parent))
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                           "--only-binary=:all:", f"ray=={RELEASE}", "-d", str(staged)],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        shutil.rmtree(staged, ignore_errors=True)
        why = (f"Ray {RELEASE} is neither in {folder} nor downloadable: "
               f"{done.stderr.strip().splitlines()[-1:]}")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    try:
        staged.chmod(0o755)
        staged.rename(folder)
    except OSError:  # another run published it first
        shutil.rmtree(staged, ignore_errors=True)
    return sorted(folder.glob(f"ray-{RELEASE}-{tag}-*.whl"))[0]


@pytest.fixture(scope="module")
def oldest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's python: Ray RELEASE in its own site-packages, then this tree (hpo), then
    this environment's site-packages (found after, so its Ray is never imported)."""
    venv = tmp_path_factory.mktemp("oldest") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                           "'purelib'))"], capture_output=True, text=True, check=True)
    site_packages = Path(site.stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--target", str(site_packages), str(_wheel())],
                   capture_output=True, text=True, check=True, timeout=900)
    outer = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (site_packages / "hpo-layers.pth").write_text("\n".join([str(ROOT), *outer]) + "\n")
    found = _run(python, "-c", "import hpo, ray; print(ray.__version__, hpo.__file__)")
    assert found.stdout.split() == [RELEASE, str(ROOT / "hpo" / "__init__.py")], found.stderr
    return python


def _run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HPO_RAY_PATCHES")}
    return subprocess.run([str(python), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**env, "PYTHONUNBUFFERED": "1",
                                            "PYTHONPATH": str(SUPPORT)})


def test_doctor_finds_the_oldest_ray_tested_and_every_patch_applies(oldest: Path) -> None:
    done = _run(oldest, "-m", "hpo", "doctor")
    rows = done.stdout.splitlines()
    assert any(row.split()[1:3] == ["ray", RELEASE] for row in rows if row.split()), done.stdout
    assert any("ray range" in row and "(tested)" in row for row in rows), done.stdout
    states = {row.split()[2]: row.split()[3] for row in rows if row.split()[1:2] == ["patch"]}
    assert set(states) == {patch.name for patch in PATCHES}, done.stdout
    # a speed patch that does not match is off (and only slower); a fix or feature applies
    assert [name for name, state in states.items() if state != "on" and
            next(p for p in PATCHES if p.name == name).kind != "speed"] == [], done.stdout


def test_a_run_stopped_by_a_signal_resumes_exactly(oldest: Path, tmp_path: Path) -> None:
    storage = tmp_path / "results"
    stopped = _run(oldest, str(SUPPORT / "stop_points.py"), str(storage), "s",
                   "SIGUSR1", "1", "4")
    assert (storage / "s.fired").exists(), stopped.stderr[-3000:]
    assert stopped.returncode == 1 and "stopped by SIGUSR1" in stopped.stderr, \
        stopped.stderr[-3000:]
    resumed = _run(oldest, "-m", "hpo", "resume", str(storage / "s"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_exact(storage / "s")
