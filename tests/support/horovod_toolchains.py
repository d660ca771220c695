"""Toolchains users have, as records, for the installer's tests (test_install_*.py): CPU,
CUDA 12 and 13 (NCCL from the wheel torch loads, or the system's), ROCm 5."""

from __future__ import annotations

import dataclasses

from hpo.install.horovod.plan import decide
from hpo.install.horovod.toolchain import BuildPlan, BuildRefusal, Nccl, Request, Toolchain

CPU = Toolchain(python="3.11.7", machine="x86_64", cxx="/usr/bin/g++", cxx_version="12.2.0",
                cmake="/usr/bin/cmake", cmake_version="3.25.1", torch="2.13.0+cpu")
WHEEL_LIB = "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
WHEEL_NCCL = Nccl("wheel", "/venv/lib/python3.12/site-packages/nvidia/nccl/include", "2.27.3",
                  WHEEL_LIB, "2.27.3")
SYSTEM_NCCL = Nccl("system", "/usr/include", "2.21.5",
                   "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5", "2.21.5")
CUDA13 = dataclasses.replace(
    CPU, python="3.12.3", cxx_version="13.3.0", cmake="/venv/bin/cmake", cmake_version="4.1.2",
    torch="2.11.0+cu130", torch_cuda="13.0",
    torch_archs=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
    nvcc="/usr/local/cuda-13.0/bin/nvcc", nvcc_version="13.0.48",
    nvcc_archs=(75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121),
    nccl_loaded=WHEEL_LIB, nccl_wheel=WHEEL_NCCL, nccl_system=SYSTEM_NCCL)
CUDA12 = dataclasses.replace(
    CUDA13, python="3.10.12", cxx_version="12.3.0", cmake="/usr/bin/cmake", cmake_version="3.28.3",
    torch="2.13.0+cu128", torch_cuda="12.8", torch_archs=("sm_50", "sm_80", "sm_90", "sm_100"),
    nvcc="/usr/local/cuda-12.4/bin/nvcc", nvcc_version="12.4.131",
    nvcc_archs=(50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90))
ROCM5 = dataclasses.replace(CPU, torch="2.3.1+rocm5.7", torch_hip="5.7.31921",
                            rocm_path="/opt/rocm-5.7.1", rocm_version="5.7.1")


def plan(found: Toolchain, request: Request | None = None) -> BuildPlan:
    result = decide(found, request)
    assert isinstance(result, BuildPlan), result
    return result


def refusal(found: Toolchain, request: Request | None = None) -> str:
    result = decide(found, request)
    assert isinstance(result, BuildRefusal), result
    assert "\n" not in result.reason and len(result.reason) < 300
    return result.reason
