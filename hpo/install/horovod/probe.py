"""What this machine offers for a Horovod build: fills a toolchain.Toolchain.

Run inside the Python that gets Horovod (it imports that Python's torch);
`python -m hpo.install horovod --probe` prints what it found, and the decision, as JSON.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from hpo.install.horovod import cuda_wheels
from hpo.install.horovod.nccl import loaded_library, nccl_system, nccl_wheel
from hpo.install.horovod.toolchain import Toolchain


def probe(wheels_first: bool = False) -> Toolchain:
    """This machine's toolchain; with `wheels_first` (--cuda) nvcc comes from PyPI's wheels."""
    torch_info = _torch()
    cuda = torch_info.get("torch_cuda")
    wheel = nccl_wheel() if cuda else None
    system = nccl_system(torch_info.get("nccl_loaded"), wheel) if cuda else None
    compiler = _compiler()
    return Toolchain(
        python=platform.python_version(), machine=platform.machine(),
        **compiler, **_cmake(), **torch_info,
        arch_env=os.environ.get("TORCH_CUDA_ARCH_LIST") or None,
        cc_env=os.environ.get("HOROVOD_BUILD_CUDA_CC_LIST") or None,
        **(_nvcc(wheels_first, compiler.get("cxx")) if cuda else {}),
        nccl_wheel=wheel, nccl_system=system,
        **(_rocm() if torch_info.get("torch_hip") else {}),
    )


def _run(*command: str) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _compiler() -> dict[str, Any]:
    cxx = shutil.which((os.environ.get("CXX") or "g++").split()[0])
    if not cxx:
        return {"cxx": None}
    clang = "clang" in _run(cxx, "--version")
    version = _run(cxx, "-dumpversion" if clang else "-dumpfullversion").strip()
    return {"cxx": cxx, "cxx_id": "clang" if clang else "gcc", "cxx_version": version or None}


def _cmake() -> dict[str, Any]:
    # The user's choice first, then PATH, then the one pip put next to this Python.
    candidates = (os.environ.get("HOROVOD_CMAKE"), shutil.which("cmake"),
                  shutil.which("cmake", path=str(Path(sys.executable).parent)))
    for cmake in filter(None, candidates):
        match = re.search(r"cmake version (\S+)", _run(cmake, "--version"))
        if match:
            return {"cmake": cmake, "cmake_version": match[1]}
    return {"cmake": None}


def _torch() -> dict[str, Any]:
    try:
        with warnings.catch_warnings():  # e.g. "Failed to initialize NumPy": not ours to report
            warnings.simplefilter("ignore")
            import torch
    except ImportError:
        return {}
    info: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                            "torch_hip": getattr(torch.version, "hip", None)}
    if torch.version.cuda:
        # get_arch_list() is empty without a visible GPU (login nodes); the flags are not.
        flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
        info["torch_archs"] = tuple((flags or "").split()) or tuple(torch.cuda.get_arch_list())
        info["nccl_loaded"] = loaded_library("libnccl")
        info["toolkit_pin"] = cuda_wheels.toolkit_pin(torch.version.cuda)
        info["nccl_pin"] = cuda_wheels.nccl_pin()
    return info


def _nvcc(wheels_first: bool, cxx: str | None) -> dict[str, Any]:
    home = os.environ.get("HOROVOD_CUDA_HOME") or os.environ.get("CUDA_HOME")
    system = [home and f"{home}/bin/nvcc", shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    wheel = cuda_wheels.wheel_nvcc()
    candidates = [wheel, *system] if wheels_first else [*system, wheel]
    nvcc = next((str(c) for c in candidates if c and os.access(c, os.X_OK)), None)
    if not nvcc:
        return {"nvcc": None}
    version = re.search(r"release [\d.]+, V([\d.]+)", _run(nvcc, "--version"))
    archs = {int(n) for n in re.findall(r"compute_(\d+)", _run(nvcc, "--list-gpu-arch"))}
    return {"nvcc": nvcc, "nvcc_version": version[1] if version else None,
            "nvcc_archs": tuple(sorted(archs)), "nvcc_host_error": host_error(nvcc, cxx)}


def host_error(nvcc: str, cxx: str | None) -> str | None:
    """nvcc's refusal of the host compiler (crt/host_config.h's version check), or None.

    Preprocessing an empty .cu runs that check and takes a tenth of a second.
    """
    if not cxx:
        return None
    with tempfile.TemporaryDirectory(prefix="hpo-nvcc-") as tmp:
        source = Path(tmp, "empty.cu")
        source.write_text("\n")
        try:
            run = subprocess.run([nvcc, "-E", "-ccbin", cxx, str(source), "-o", os.devnull],
                                 capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as error:
            return f"nvcc did not run: {error}"
    if run.returncode == 0:
        return None
    match = re.search(r"unsupported \w+ version! (.+? are not supported)", run.stderr)
    return match[1] if match else None  # other failures show in the build itself


def _rocm() -> dict[str, Any]:
    candidates = [os.environ.get(n) for n in ("HOROVOD_ROCM_HOME", "ROCM_PATH", "ROCM_HOME")]
    path = next((c for c in [*candidates, "/opt/rocm"] if c and os.path.isdir(c)), None)
    if not path:
        return {"rocm_path": None}
    info = Path(path, ".info", "version")
    text = info.read_text() if info.is_file() else os.path.basename(os.path.realpath(path))
    match = re.search(r"\d+\.\d+(?:\.\d+)?", text)
    return {"rocm_path": path, "rocm_version": match[0] if match else None}
