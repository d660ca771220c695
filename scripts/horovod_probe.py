"""What this machine offers for a Horovod build: fills horovod_build.Toolchain.

Run inside the Python that gets Horovod (it imports that Python's torch); `python
scripts/horovod_probe.py` prints what it found as JSON.
"""

from __future__ import annotations

import ctypes
import dataclasses
import glob
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from horovod_build import Nccl, Toolchain


def probe() -> Toolchain:
    torch_info = _torch()
    cuda = torch_info.get("torch_cuda")
    loaded = torch_info.get("nccl_loaded")
    wheel = _nccl_wheel() if cuda else None
    system = _nccl_system(loaded, wheel) if cuda else None
    return Toolchain(
        python=platform.python_version(), machine=platform.machine(),
        **_compiler(), **_cmake(), **torch_info,
        arch_env=os.environ.get("TORCH_CUDA_ARCH_LIST") or None,
        cc_env=os.environ.get("HOROVOD_BUILD_CUDA_CC_LIST") or None,
        **(_nvcc() if cuda else {}), nccl_wheel=wheel, nccl_system=system,
        **(_rocm() if torch_info.get("torch_hip") else {}),
    )


def _run(*command: str) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _compiler() -> dict:
    cxx = shutil.which((os.environ.get("CXX") or "g++").split()[0])
    if not cxx:
        return {"cxx": None}
    clang = "clang" in _run(cxx, "--version")
    version = _run(cxx, "-dumpversion" if clang else "-dumpfullversion").strip()
    return {"cxx": cxx, "cxx_id": "clang" if clang else "gcc", "cxx_version": version or None}


def _cmake() -> dict:
    # The user's choice first, then PATH, then the one pip put next to this Python.
    candidates = (os.environ.get("HOROVOD_CMAKE"), shutil.which("cmake"),
                  shutil.which("cmake", path=str(Path(sys.executable).parent)))
    for cmake in filter(None, candidates):
        match = re.search(r"cmake version (\S+)", _run(cmake, "--version"))
        if match:
            return {"cmake": cmake, "cmake_version": match[1]}
    return {"cmake": None}


def _torch() -> dict:
    try:
        with warnings.catch_warnings():  # e.g. "Failed to initialize NumPy": not ours to report
            warnings.simplefilter("ignore")
            import torch
    except ImportError:
        return {}
    info: dict = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                  "torch_hip": getattr(torch.version, "hip", None)}
    if torch.version.cuda:
        # get_arch_list() is empty without a visible GPU (login nodes); the flags are not.
        flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
        info["torch_archs"] = tuple((flags or "").split()) or tuple(torch.cuda.get_arch_list())
        info["nccl_loaded"] = _loaded_library("libnccl")
    return info


def _loaded_library(stem: str) -> str | None:
    """The file of a shared library this process has mapped (what torch really uses)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    match = re.search(rf"(/\S*/{stem}\.so[.\d]*)$", maps, re.MULTILINE)
    return os.path.realpath(match[1]) if match else None


def _nvcc() -> dict:
    home = os.environ.get("HOROVOD_CUDA_HOME") or os.environ.get("CUDA_HOME")
    candidates = (home and f"{home}/bin/nvcc", shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc")
    nvcc = next((c for c in candidates if c and os.access(c, os.X_OK)), None)
    if not nvcc:
        return {"nvcc": None}
    version = re.search(r"release [\d.]+, V([\d.]+)", _run(nvcc, "--version"))
    archs = {int(n) for n in re.findall(r"compute_(\d+)", _run(nvcc, "--list-gpu-arch"))}
    return {"nvcc": nvcc, "nvcc_version": version[1] if version else None,
            "nvcc_archs": tuple(sorted(archs))}


def _nccl_wheel() -> Nccl | None:
    """The nvidia-nccl-cu* package (nvidia/nccl/lib/libnccl.so.2 and include/nccl.h)."""
    spec = importlib.util.find_spec("nvidia")
    bases = list(spec.submodule_search_locations or []) if spec else []
    # nvidia/nccl/lib for the cu12 wheels; one level deeper leaves room for nvidia/cu13/...
    found = [path for base in bases for pattern in ("*/lib/libnccl.so*", "*/*/lib/libnccl.so*")
             for path in sorted(glob.glob(f"{base}/{pattern}"))]
    if not found:
        return None
    return _nccl("wheel", found[0], [Path(found[0]).parent.parent / "include"])


def _nccl_system(loaded: str | None, wheel: Nccl | None) -> Nccl | None:
    library = loaded if loaded and (not wheel or loaded != wheel.library) else _find_library()
    if not library:
        return None
    homes = [os.environ.get(name) for name in ("HOROVOD_NCCL_HOME", "NCCL_HOME", "CUDA_HOME")]
    includes = [os.environ.get("HOROVOD_NCCL_INCLUDE"), Path(library).parent.parent / "include",
                *(home and f"{home}/include" for home in homes),
                "/usr/include", "/usr/local/include", "/usr/local/cuda/include"]
    return _nccl("system", library, [Path(i) for i in includes if i])


def _find_library() -> str | None:
    homes = [os.environ.get("HOROVOD_NCCL_LIB"), *(
        f"{os.environ[name]}/{lib}" for name in ("HOROVOD_NCCL_HOME", "NCCL_HOME")
        if os.environ.get(name) for lib in ("lib", "lib64"))]
    folders = [*filter(None, homes), *os.environ.get("LD_LIBRARY_PATH", "").split(":")]
    for folder in filter(None, folders):
        if os.path.exists(f"{folder}/libnccl.so.2"):
            return os.path.realpath(f"{folder}/libnccl.so.2")
    match = re.search(r"libnccl\.so\.2 .*=> (\S+)", _run("/sbin/ldconfig", "-p"))
    return os.path.realpath(match[1]) if match else None


def _nccl(source: str, library: str, includes: list[Path]) -> Nccl:
    """The first nccl.h of the same version as the library (else the first found)."""
    library = os.path.realpath(library)
    library_version = _library_version(library)
    headers = [(i, _header_version(i / "nccl.h")) for i in includes if (i / "nccl.h").is_file()]
    include, version = next((h for h in headers if h[1] == library_version),
                            headers[0] if headers else (None, None))
    return Nccl(source=source, include_dir=str(include) if include else None,
                header_version=version, library=library, library_version=library_version)


def _header_version(header: Path) -> str | None:
    text = header.read_text(errors="replace")
    parts = [re.search(rf"#define\s+NCCL_{name}\s+(\d+)", text) for name in
             ("MAJOR", "MINOR", "PATCH")]
    return ".".join(p[1] for p in parts) if all(parts) else None  # type: ignore[index]


def _library_version(library: str) -> str | None:
    try:
        code = ctypes.c_int()
        if ctypes.CDLL(library).ncclGetVersion(ctypes.byref(code)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    # NCCL >= 2.9 encodes major*10000 + minor*100 + patch, older ones major*1000 + minor*100.
    value = code.value
    major, rest = divmod(value, 10000 if value >= 20900 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _rocm() -> dict:
    candidates = [os.environ.get(n) for n in ("HOROVOD_ROCM_HOME", "ROCM_PATH", "ROCM_HOME")]
    path = next((c for c in [*candidates, "/opt/rocm"] if c and os.path.isdir(c)), None)
    if not path:
        return {"rocm_path": None}
    info = Path(path, ".info", "version")
    text = info.read_text() if info.is_file() else os.path.basename(os.path.realpath(path))
    match = re.search(r"\d+\.\d+(?:\.\d+)?", text)
    return {"rocm_path": path, "rocm_version": match[0] if match else None}


if __name__ == "__main__":
    print(json.dumps(dataclasses.asdict(probe()), indent=2))
