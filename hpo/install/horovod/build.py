"""Carrying a BuildPlan out: the build's environment, `pip wheel`, and stripping the wheel.

pip's and the compilers' output goes to a log file; a failed step raises StepFailed with the
one line the terminal gets.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from hpo.install.horovod import cuda_wheels
from hpo.install.horovod.failures import summarize_failure
from hpo.install.horovod.toolchain import HOROVOD_VERSION, BuildPlan

RUNTIME_DEPS = ("cloudpickle", "psutil", "pyyaml", "packaging", "cffi")
# Installed before building without build isolation: Horovod's setup.py imports packaging and
# lists its runtime deps as setup_requires, which setuptools would otherwise fetch itself.
BUILD_DEPS = ("setuptools", "wheel", *RUNTIME_DEPS)
CXX17_WRAPPER = """#!/usr/bin/env bash
# Horovod 0.28.1's CMake pins C++14; torch >= 2.1 headers need C++17.
args=()
for arg in "$@"; do
  case "$arg" in -std=c++14|-std=gnu++14) arg=-std=gnu++17 ;; esac
  args+=("$arg")
done
exec "{cxx}" "${{args[@]}}"
"""


class StepFailed(Exception):
    """A step failed; the message is the one line to print."""


def pip(log: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """`python -m pip ARGS` in this Python, its output appended to `log`."""
    with log.open("a") as out:
        out.write(f"\n$ pip {' '.join(args)}\n")
        out.flush()
        run = subprocess.run([sys.executable, "-m", "pip", *args], stdout=out,
                             stderr=subprocess.STDOUT, env=env)
    if run.returncode != 0 and args[0] != "uninstall":
        raise StepFailed(f"pip {args[0]} {args[-1]} failed")


def build_wheel(plan: BuildPlan, tmp: Path, log: Path) -> Path:
    """Horovod's wheel, built by `pip wheel` from its sdist (PyPI's, or a wheelhouse's)."""
    pip(log, "install", *BUILD_DEPS)
    start = log.stat().st_size
    # --verbose: the compilers' output goes to the log. --no-cache-dir: pip's own wheel cache
    # knows nothing of torch's version or CUDA.
    command = ("wheel", "--verbose", "--no-deps", "--no-build-isolation", "--no-cache-dir",
               "--no-binary", "horovod", "-w", str(tmp / "dist"), f"horovod=={HOROVOD_VERSION}")
    try:
        pip(log, *command, env=build_env(plan, tmp))
    except StepFailed:
        output = log.read_bytes()[start:].decode(errors="replace")
        raise StepFailed(f"Horovod build failed: {summarize_failure(output)}") from None
    return next((tmp / "dist").glob("horovod-*.whl"))


def build_env(plan: BuildPlan, tmp: Path) -> dict[str, str]:
    env = {**os.environ, **plan.env}
    wrapper = tmp / "cxx17"
    wrapper.write_text(CXX17_WRAPPER.format(cxx=plan.cxx))
    wrapper.chmod(0o755)
    env["CXX"] = str(wrapper)
    flags = [os.environ.get("CXXFLAGS", ""), plan.cxxflags]
    if plan.cuda_wheels:
        nvcc = Path(plan.env["HOROVOD_CUDA_HOME"], "bin", "nvcc")
        env["HOROVOD_CUDA_HOME"] = str(cuda_wheels.stage_toolkit(nvcc, tmp / "cuda"))
    if "HOROVOD_CUDA_HOME" in env and plan.env.get("HOROVOD_GPU") == "CUDA":
        # Horovod builds its torch part for CUDA only when torch sees a CUDA_HOME.
        env["CUDA_HOME"] = env["HOROVOD_CUDA_HOME"]
    if plan.nccl:
        home = stage_nccl(plan, tmp / "nccl")
        env.update(HOROVOD_NCCL_HOME=str(home), HOROVOD_NCCL_INCLUDE=str(home / "include"),
                   HOROVOD_NCCL_LIB=str(home / "lib"))
        # -I is searched before every -isystem: a CUDA toolkit's own nccl.h cannot win.
        flags.append(f"-I{home / 'include'}")
    env["CXXFLAGS"] = " ".join(flag for flag in flags if flag)
    env.setdefault("MAKEFLAGS", f"-j{len(os.sched_getaffinity(0))}")
    return env


def stage_nccl(plan: BuildPlan, home: Path) -> Path:
    """include/ and lib/libnccl.so of the one NCCL chosen: the nvidia-nccl wheel ships only
    libnccl.so.2, so Horovod's find_library(nccl) would otherwise take the system's."""
    if not (plan.nccl and plan.nccl.include_dir and plan.nccl.library):
        raise ValueError(f"no NCCL to stage in {plan.summary}")
    (home / "include").mkdir(parents=True)
    (home / "lib").mkdir()
    for header in Path(plan.nccl.include_dir).glob("nccl*"):
        (home / "include" / header.name).symlink_to(header)
    for name in ("libnccl.so", "libnccl.so.2"):
        (home / "lib" / name).symlink_to(plan.nccl.library)
    return home


def strip_wheel(wheel: Path, folder: Path) -> Path | None:
    """A copy of `wheel` in `folder` with its shared libraries' debug info stripped (RECORD
    rewritten to match); None where there is no `strip`. Horovod's CUDA library is ~69 MB of
    which ~66 MB are debug info."""
    strip = shutil.which("strip")
    if strip is None:
        return None
    with zipfile.ZipFile(wheel) as source:
        items = [(item, source.read(item)) for item in source.infolist()]
    contents = {item.filename: _stripped(strip, data) if _is_library(item.filename) else data
                for item, data in items}
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / wheel.name
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for item, _ in items:
            data = contents[item.filename]
            if item.filename.endswith(".dist-info/RECORD"):
                data = _record(data.decode(), contents).encode()
            out.writestr(item, data)
    return target


def _is_library(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def _stripped(strip: str, data: bytes) -> bytes:
    with tempfile.TemporaryDirectory(prefix="hpo-strip-") as tmp:
        path = Path(tmp, "lib.so")
        path.write_bytes(data)
        subprocess.run([strip, "--strip-debug", str(path)], check=True, capture_output=True)
        return path.read_bytes()


def _record(text: str, contents: dict[str, bytes]) -> str:
    """RECORD with each file's hash and size as written (RECORD itself has neither)."""
    lines = []
    for line in text.splitlines():
        name = line.rsplit(",", 2)[0]
        if name in contents and not name.endswith(".dist-info/RECORD"):
            digest = base64.urlsafe_b64encode(hashlib.sha256(contents[name]).digest())
            line = f"{name},sha256={digest.rstrip(b'=').decode()},{len(contents[name])}"
        lines.append(line)
    return "\n".join(lines) + "\n"
