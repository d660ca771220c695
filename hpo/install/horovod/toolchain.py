"""What a Horovod build is decided from, and what the decision is: plain frozen records.

`probe.py` fills a `Toolchain` from this machine, the user's options make a `Request`,
`plan.decide` turns both into a `BuildPlan` or a one-line `BuildRefusal`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HOROVOD_VERSION = "0.28.1"
# Part of the cache key: bump it when a change here changes the wheels built, so that wheels
# built by an older recipe are not reused. 2: the shared libraries are stripped of debug info.
RECIPE = 2


@dataclass(frozen=True)
class Nccl:
    source: str  # "wheel" (the nvidia-nccl-cu* package) or "system"
    include_dir: str | None  # the folder holding nccl.h
    header_version: str | None  # from nccl.h, "2.27.3"
    library: str | None  # the libnccl.so.2 file (symlinks resolved)
    library_version: str | None  # from ncclGetVersion()


@dataclass(frozen=True)
class Toolchain:
    python: str  # "3.11.7"
    machine: str  # "x86_64"
    cxx: str | None = None
    cxx_id: str = "gcc"  # gcc | clang
    cxx_version: str | None = None
    cmake: str | None = None
    cmake_version: str | None = None
    torch: str | None = None  # "2.13.0+cpu"
    torch_cuda: str | None = None  # "13.0"
    torch_hip: str | None = None  # "6.2.41133"
    torch_archs: tuple[str, ...] = ()  # what torch was compiled for: "sm_90", "compute_120"
    arch_env: str | None = None  # TORCH_CUDA_ARCH_LIST
    cc_env: str | None = None  # HOROVOD_BUILD_CUDA_CC_LIST, when the user set it
    nvcc: str | None = None
    nvcc_version: str | None = None  # "13.0.48"
    nvcc_archs: tuple[int, ...] = ()  # `nvcc --list-gpu-arch`; empty: not known
    nvcc_host_error: str | None = None  # nvcc's complaint about the host compiler, if any
    toolkit_pin: str | None = None  # "cuda-toolkit[nvcc,cccl,crt,nvvm]==13.0.2", from torch's
    nccl_pin: str | None = None  # "nvidia-nccl-cu13==2.28.9": the NCCL torch requires
    nccl_loaded: str | None = None  # the libnccl file torch has loaded (symlinks resolved)
    nccl_wheel: Nccl | None = None
    nccl_system: Nccl | None = None
    rocm_path: str | None = None
    rocm_version: str | None = None  # the toolkit's, "6.2.4"


@dataclass(frozen=True)
class Request:
    """What the user asked for (`hpo install horovod --cuda [X] --arch LIST`)."""

    cuda: str | None = None  # None: decide from torch; "torch": its CUDA; "13", "12.x", "13.0"
    archs: str | None = None  # "80,90", "9.0;8.0", "sm_90", "hopper"


@dataclass(frozen=True)
class BuildPlan:
    env: dict[str, str]  # added to the build's environment
    cxx: str  # the C++ compiler, wrapped to raise Horovod's C++14 to the C++17 torch needs
    cxxflags: str  # appended to CXXFLAGS
    key: str  # the wheel cache key
    summary: str  # one line: what is built
    nccl: Nccl | None = None  # staged as include/nccl.h + lib/libnccl.so for Horovod's FindNCCL
    cuda_wheels: bool = False  # nvcc is PyPI's: stage a CUDA home from the wheels (cuda_wheels)


@dataclass(frozen=True)
class BuildRefusal:
    reason: str  # one line: the missing piece and what to do


def version_tuple(text: str | None) -> tuple[int, ...]:
    """Leading dotted numbers: "12.2.0-14" -> (12, 2, 0); "" -> ()."""
    match = re.match(r"\d+(?:\.\d+)*", text or "")
    return tuple(int(part) for part in match.group().split(".")) if match else ()
