"""How to build Horovod 0.28.1 against the torch installed: decided from the toolchain found.

decide() is pure (no I/O), so every toolchain users have is unit-tested without it
(tests/install/test_install_horovod.py); probe.py fills a Toolchain from this machine and install.py
carries the plan out. cuda.py holds the CUDA part of the decision.
"""

from __future__ import annotations

import re

from hpo.install.horovod.cuda import DDP_HINT, Gpu, check_request, cuda_build
from hpo.install.horovod.toolchain import (
    HOROVOD_VERSION,
    RECIPE,
    BuildPlan,
    BuildRefusal,
    Request,
    Toolchain,
    version_tuple,
)

MIN_GCC = (9,)  # torch 2.x headers need C++17 and its library (<optional>, std::filesystem)
MIN_CLANG = (10,)
MIN_CMAKE = (3, 13)  # Horovod's own cmake_minimum_required
# GCC 13 no longer includes these transitively, and Horovod 0.28.1 (group_table.h: std::string,
# common.h: std::logic_error) and its gloo (uint8_t) relied on it. Harmless on older compilers,
# so always added: the GCC 12 build proves they are accepted there.
FORCE_INCLUDES = "-include cstdint -include string -include stdexcept"
BASE_ENV = {
    "HOROVOD_WITH_PYTORCH": "1",
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_WITHOUT_MPI": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
}


def decide(found: Toolchain, request: Request | None = None) -> BuildPlan | BuildRefusal:
    request = request or Request()
    for reason in (_check_torch(found), check_request(found, request), _check_compiler(found),
                   _check_cmake(found)):
        if reason:
            return BuildRefusal(reason)
    gpu = _accelerator(found, request)
    if isinstance(gpu, BuildRefusal):
        return gpu
    env = {**BASE_ENV, "HOROVOD_CMAKE": str(found.cmake), **gpu.env}
    if version_tuple(found.cmake_version) >= (4,):
        # CMake 4 refuses gloo's cmake_minimum_required(VERSION 2.8.12); this is its own
        # documented escape hatch, and CMake 3.x ignores it.
        env["CMAKE_POLICY_VERSION_MINIMUM"] = "3.5"
    summary = (f"Horovod {HOROVOD_VERSION} with {gpu.summary}; torch {found.torch}, "
               f"{found.cxx_id} {found.cxx_version}, cmake {found.cmake_version}")
    return BuildPlan(env=env, cxx=str(found.cxx), cxxflags=FORCE_INCLUDES,
                     key=cache_key(found, gpu.key), summary=summary, nccl=gpu.nccl,
                     cuda_wheels=gpu.cuda_wheels)


def _accelerator(found: Toolchain, request: Request) -> Gpu | BuildRefusal:
    if found.torch_cuda:
        return cuda_build(found, request)
    if found.torch_hip:
        return _rocm(found)
    return Gpu(env={}, key="cpu", summary="Gloo (torch is a CPU build)")


def cache_key(found: Toolchain, accelerator: str) -> str:
    """Everything the wheel's binary depends on, as a folder name."""
    python = "cp" + "".join(found.python.split(".")[:2])
    parts = (f"horovod{HOROVOD_VERSION}", f"torch{found.torch}", accelerator, python,
             f"{found.cxx_id}{found.cxx_version}", found.machine, f"r{RECIPE}")
    return re.sub(r"[^A-Za-z0-9.+_-]", "_", "-".join(parts))


def _check_torch(found: Toolchain) -> str | None:
    if not found.torch:
        return ("torch is not installed in this Python: install torch first "
                "(scripts/setup.sh does)")
    return None


def _check_compiler(found: Toolchain) -> str | None:
    if not found.cxx:
        return "no C++ compiler found (g++): install g++ >= 9 or set CXX"
    minimum = MIN_CLANG if found.cxx_id == "clang" else MIN_GCC
    if version_tuple(found.cxx_version) < minimum:
        return (f"{found.cxx_id} {found.cxx_version} ({found.cxx}) is too old: torch needs "
                f"{found.cxx_id} >= {minimum[0]}; load a newer compiler (module load GCC) "
                "or set CXX")
    return None


def _check_cmake(found: Toolchain) -> str | None:
    if not found.cmake:
        return "cmake not found: pip install cmake (or module load CMake), or set HOROVOD_CMAKE"
    if version_tuple(found.cmake_version) < MIN_CMAKE:
        return (f"cmake {found.cmake_version} ({found.cmake}) is too old: Horovod needs >= 3.13; "
                "pip install cmake, or set HOROVOD_CMAKE")
    return None


def _rocm(found: Toolchain) -> Gpu | BuildRefusal:
    hip = found.torch_hip
    if not found.rocm_path:
        return BuildRefusal(f"ROCm not found: torch {found.torch} is a ROCm {hip} build; set "
                            f"ROCM_PATH (module load rocm), {DDP_HINT}")
    toolkit = found.rocm_version or hip
    if version_tuple(toolkit)[:1] != version_tuple(hip)[:1]:
        return BuildRefusal(f"ROCm {toolkit} at {found.rocm_path} does not match torch's ROCm "
                            f"{hip}: set ROCM_PATH to a ROCm {version_tuple(hip)[0]} install")
    if version_tuple(toolkit) >= (6,):
        # Known upstream breakage, unreleased fixes: no ROCm 6 machine here to prove a patch on.
        return BuildRefusal(f"Horovod {HOROVOD_VERSION} does not build with ROCm {toolkit} "
                            "(hip_add_library removed, rccl.h moved to rccl/rccl.h); train with "
                            "`distributed: {backend: ddp}` (RCCL through torch) instead")
    env = {"HOROVOD_GPU": "ROCM", "HOROVOD_GPU_OPERATIONS": "NCCL",
           "HOROVOD_ROCM_HOME": found.rocm_path, "ROCM_PATH": found.rocm_path}
    return Gpu(env=env, key=f"rocm{toolkit}", summary=f"Gloo + RCCL, ROCm {toolkit}")
