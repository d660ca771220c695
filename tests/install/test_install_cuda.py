"""The real CUDA build on a machine without a GPU or a system CUDA (slow: ~4 GB of wheels and a
3-6 minute build on 2 cores). A venv gets PyPI's torch (the CUDA 13 build) and nothing else;
`hpo install horovod --cuda --arch 80,90` installs nvcc and CCCL pinned to torch's CUDA, builds
Horovod with NCCL, and the wheel imports without a GPU, with NCCL built in, loading the one
NCCL torch loads. The venv and the wheel cache are made once per test run (session fixtures)
and reused by every test here; set HPO_TEST_CUDA_DIR to keep them across runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCH = os.environ.get("HPO_TEST_CUDA_TORCH", "torch==2.13.0")
ARCHS = "80,90"  # A100 (JUWELS Booster, JURECA-DC) and H100/GH200

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

# What the venv's Python reports after `import torch, horovod.torch`: no GPU needed.
CHECK = """
import ctypes, json, re, torch, horovod.torch as hvd
files = sorted(set(re.findall(r"(/\\S*/libnccl\\.so[.\\d]*)$", open("/proc/self/maps").read(),
                              re.MULTILINE)))
code = ctypes.c_int()
ctypes.CDLL(files[0]).ncclGetVersion(ctypes.byref(code))
print(json.dumps({"torch_cuda": torch.version.cuda, "gpu": torch.cuda.is_available(),
                  "nccl_built": int(hvd.nccl_built()), "gloo": bool(hvd.gloo_built()),
                  "cuda_built": bool(hvd.cuda_built()), "nccl_files": files,
                  "nccl_loaded": code.value, "horovod": hvd.__file__}))
"""


def _env(folder: Path) -> dict[str, str]:
    """PyPI only: this machine's pip configuration may add a folder whose torch is a +cpu
    build (a local version sorts above PyPI's)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") or k in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PYTHONPATH": str(ROOT),
            "HPO_WHEEL_CACHE": str(folder / "wheels"), "HPO_HOROVOD_LOG": str(folder / "log")}


@pytest.fixture(scope="session")
def cuda_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    configured = os.environ.get("HPO_TEST_CUDA_DIR")
    folder = Path(configured) if configured else tmp_path_factory.mktemp("cuda")
    python = folder / "venv" / "bin" / "python"
    env = _env(folder)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", TORCH, "pyyaml"],
                       check=True, env=env)
    return python, env


@pytest.fixture(scope="session")
def built(cuda_venv: tuple[Path, dict[str, str]]) -> dict:
    """`hpo install horovod --cuda` once per session: its output and how long it took."""
    python, env = cuda_venv
    started = time.monotonic()
    run = subprocess.run([str(python), "-m", "hpo.install", "horovod", "--cuda", "--arch",
                          ARCHS], capture_output=True, text=True, env=env, cwd=python.parent)
    seconds = time.monotonic() - started
    log = Path(env["HPO_HOROVOD_LOG"]).read_text(errors="replace")
    assert run.returncode == 0, run.stderr + log[-3000:]
    wheels = sorted(Path(env["HPO_WHEEL_CACHE"]).glob("*/horovod-*.whl"))
    return {"stdout": run.stdout, "seconds": seconds, "wheels": wheels}


def test_the_cuda_build_imports_without_a_gpu_and_uses_torchs_nccl(cuda_venv, built) -> None:
    python, env = cuda_venv
    (wheel,) = built["wheels"]
    print(f"\nhpo install horovod --cuda --arch {ARCHS}: {built['seconds']:.0f} s, "
          f"{wheel.stat().st_size / 1e6:.1f} MB, {wheel.parent.name}")
    assert "cuda13.0-sm80.90-nccl" in wheel.parent.name
    run = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True, env=env,
                         cwd=python.parent, check=True)
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["torch_cuda"] == "13.0" and not found["gpu"]
    assert found["nccl_built"] and found["gloo"] and found["cuda_built"]
    (library,) = found["nccl_files"]  # one NCCL in the process, never a mix
    assert "/site-packages/nvidia/nccl/lib/" in library  # torch's own, from its wheel
    assert found["nccl_built"] == found["nccl_loaded"]  # built with that NCCL's nccl.h
    assert found["horovod"].startswith(str(python.parent.parent))


def test_the_cuda_wheel_is_stripped_and_has_both_archs(built) -> None:
    (wheel,) = built["wheels"]
    assert wheel.stat().st_size < 12e6  # 20.9 MB with debug info
    with zipfile.ZipFile(wheel) as archive:
        library = next(n for n in archive.namelist() if "torch/mpi_lib_v2" in n)
        data = archive.read(library)
    assert b".debug_info" not in data
    for arch in (b"sm_80", b"sm_90"):
        assert arch in data


def test_the_second_install_takes_the_cached_wheel(cuda_venv, built) -> None:
    python, env = cuda_venv
    started = time.monotonic()
    run = subprocess.run([str(python), "-m", "hpo.install", "horovod", "--cuda", "--arch",
                          ARCHS, "--wheelhouse", str(python.parent.parent / "wheelhouse")],
                         capture_output=True, text=True, env=env, cwd=python.parent)
    assert run.returncode == 0, run.stderr
    assert "(cached " in run.stdout and time.monotonic() - started < 120
    (exported,) = (python.parent.parent / "wheelhouse" / "horovod").glob("*/horovod-*.whl")
    assert exported.read_bytes() == built["wheels"][0].read_bytes()
