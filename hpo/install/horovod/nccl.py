"""Where NCCL is on this machine: the nvidia-nccl wheel, a system one, and the one loaded.

Part of the probe (probe.py): each NCCL found is read twice, its nccl.h's version and its
library's own ncclGetVersion(), so a header of one NCCL and a library of another are told apart.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import re
import subprocess
from pathlib import Path

from hpo.install.horovod.toolchain import Nccl


def loaded_library(stem: str) -> str | None:
    """The file of a shared library this process has mapped (what torch really uses)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    match = re.search(rf"(/\S*/{stem}\.so[.\d]*)$", maps, re.MULTILINE)
    return os.path.realpath(match[1]) if match else None


def nccl_wheel() -> Nccl | None:
    """The nvidia-nccl-cu* package (nvidia/nccl/lib/libnccl.so.2 and include/nccl.h)."""
    spec = importlib.util.find_spec("nvidia")
    bases = list(spec.submodule_search_locations or []) if spec else []
    # nvidia/nccl/lib for the cu12 and cu13 wheels; one level deeper leaves room for more.
    found = [path for base in bases for pattern in ("*/lib/libnccl.so*", "*/*/lib/libnccl.so*")
             for path in sorted(glob.glob(f"{base}/{pattern}"))]
    if not found:
        return None
    return _nccl("wheel", found[0], [Path(found[0]).parent.parent / "include"])


def nccl_system(loaded: str | None, wheel: Nccl | None) -> Nccl | None:
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
    try:
        listed = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True,
                                timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"libnccl\.so\.2 .*=> (\S+)", listed)
    return os.path.realpath(match[1]) if match else None


def _nccl(source: str, library: str, includes: list[Path]) -> Nccl:
    """The first nccl.h of the same version as the library (else the first found)."""
    library = os.path.realpath(library)
    library_version = library_version_of(library)
    headers = [(i, header_version(i / "nccl.h")) for i in includes if (i / "nccl.h").is_file()]
    include, version = next((h for h in headers if h[1] == library_version),
                            headers[0] if headers else (None, None))
    return Nccl(source=source, include_dir=str(include) if include else None,
                header_version=version, library=library, library_version=library_version)


def header_version(header: Path) -> str | None:
    text = header.read_text(errors="replace")
    parts = [re.search(rf"#define\s+NCCL_{name}\s+(\d+)", text) for name in
             ("MAJOR", "MINOR", "PATCH")]
    return ".".join(p[1] for p in parts) if all(parts) else None  # type: ignore[index]  # no None


def library_version_of(library: str) -> str | None:
    try:
        code = ctypes.c_int()
        if ctypes.CDLL(library).ncclGetVersion(ctypes.byref(code)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return version_from_code(code.value)


def version_from_code(value: int) -> str:
    """ncclGetVersion()'s and nccl_built()'s number: 22809 -> "2.28.9", 2708 -> "2.7.8"."""
    # NCCL >= 2.9 encodes major*10000 + minor*100 + patch, older ones major*1000 + minor*100.
    major, rest = divmod(value, 10000 if value >= 20900 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"
