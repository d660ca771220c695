"""How to build Horovod 0.28.1 against the torch installed: decided from the toolchain found.

decide() is pure (no I/O), so every toolchain users have is unit-tested without it
(tests/test_install_horovod.py); horovod_probe.py fills a Toolchain from this machine and
install_horovod.py carries the plan out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HOROVOD_VERSION = "0.28.1"
# Part of the cache key: bump it when a change here changes the wheels built, so that wheels
# built by an older recipe are not reused.
RECIPE = 1
MIN_GCC = (9,)  # torch 2.x headers need C++17 and its library (<optional>, std::filesystem)
MIN_CLANG = (10,)
MIN_CMAKE = (3, 13)  # Horovod's own cmake_minimum_required
# GCC 13 no longer includes these transitively, and Horovod 0.28.1 (group_table.h: std::string,
# common.h: std::logic_error) and its gloo (uint8_t) relied on it. Harmless on older compilers,
# so always added: the GCC 12 build proves they are accepted there.
FORCE_INCLUDES = "-include cstdint -include string -include stdexcept"
DDP_HINT = "or train with `distributed: {backend: ddp}` instead"
BASE_ENV = {
    "HOROVOD_WITH_PYTORCH": "1",
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_WITHOUT_MPI": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
}
# TORCH_CUDA_ARCH_LIST also takes names (torch.utils.cpp_extension's table).
ARCH_NAMES = {
    "turing": (75,), "ampere": (80, 86), "ada": (89,), "hopper": (90,), "blackwell": (100, 120),
}


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
    nccl_loaded: str | None = None  # the libnccl file torch has loaded (symlinks resolved)
    nccl_wheel: Nccl | None = None
    nccl_system: Nccl | None = None
    rocm_path: str | None = None
    rocm_version: str | None = None  # the toolkit's, "6.2.4"


@dataclass(frozen=True)
class BuildPlan:
    env: dict[str, str]  # added to the build's environment
    cxx: str  # the C++ compiler, wrapped to raise Horovod's C++14 to the C++17 torch needs
    cxxflags: str  # appended to CXXFLAGS
    key: str  # the wheel cache key
    summary: str  # one line: what is built
    nccl: Nccl | None = None  # staged as include/nccl.h + lib/libnccl.so for Horovod's FindNCCL


@dataclass(frozen=True)
class BuildRefusal:
    reason: str  # one line: the missing piece and what to do


@dataclass(frozen=True)
class _Gpu:
    env: dict[str, str]
    key: str
    summary: str
    nccl: Nccl | None = None


def version_tuple(text: str | None) -> tuple[int, ...]:
    """Leading dotted numbers: "12.2.0-14" -> (12, 2, 0); "" -> ()."""
    match = re.match(r"\d+(?:\.\d+)*", text or "")
    return tuple(int(part) for part in match.group().split(".")) if match else ()


def decide(found: Toolchain) -> BuildPlan | BuildRefusal:
    for check in (_check_torch, _check_compiler, _check_cmake):
        reason = check(found)
        if reason:
            return BuildRefusal(reason)
    if found.torch_cuda:
        gpu = _cuda(found)
    elif found.torch_hip:
        gpu = _rocm(found)
    else:
        gpu = _Gpu(env={}, key="cpu", summary="Gloo (torch is a CPU build)")
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
                     key=cache_key(found, gpu.key), summary=summary, nccl=gpu.nccl)


def cache_key(found: Toolchain, accelerator: str) -> str:
    """Everything the wheel's binary depends on, as a folder name."""
    python = "cp" + "".join(found.python.split(".")[:2])
    parts = (f"horovod{HOROVOD_VERSION}", f"torch{found.torch}", accelerator, python,
             f"{found.cxx_id}{found.cxx_version}", found.machine, f"r{RECIPE}")
    return re.sub(r"[^A-Za-z0-9.+_-]", "_", "-".join(parts))


def _check_torch(found: Toolchain) -> str | None:
    if not found.torch:
        return "torch is not installed in this Python: install torch first (scripts/setup.sh does)"
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


def _cuda(found: Toolchain) -> _Gpu | BuildRefusal:
    # Horovod compiles its kernels as C++11 (CMAKE_CUDA_STANDARD 11). nvcc 13 still takes
    # -std=c++11, and cuda_kernels.cu includes only cuda_runtime.h and cuda_fp16.h, none of the
    # C++17-only CCCL: it built with CUDA 13.0 on the H100 node (shared/notes/gpu-node.md).
    cuda, major = found.torch_cuda, version_tuple(found.torch_cuda)[:1]
    if not found.nvcc:
        return BuildRefusal(
            f"nvcc not found: torch {found.torch} is a CUDA {cuda} build; load a CUDA "
            f"{major[0]} toolkit (module load CUDA) or set HOROVOD_CUDA_HOME, {DDP_HINT}")
    if found.nvcc_version and version_tuple(found.nvcc_version)[:1] != major:
        return BuildRefusal(
            f"nvcc {found.nvcc_version} ({found.nvcc}) does not match torch's CUDA {cuda}: "
            f"load a CUDA {major[0]} toolkit or set HOROVOD_CUDA_HOME")
    archs = cuda_archs(found)
    if isinstance(archs, BuildRefusal):
        return archs
    nccl = choose_nccl(found)
    if isinstance(nccl, BuildRefusal):
        return nccl
    cc_list = ",".join(str(cc) for cc in archs)
    env = {
        "HOROVOD_GPU": "CUDA",
        "HOROVOD_GPU_OPERATIONS": "NCCL",
        "HOROVOD_CUDA_HOME": found.nvcc.rsplit("/bin/", 1)[0],
        "HOROVOD_BUILD_CUDA_CC_LIST": cc_list,
        "HOROVOD_NCCL_LINK": "SHARED",  # the .so torch loads, not a second static copy
    }
    return _Gpu(env=env, key=f"cuda{cuda}-sm{cc_list.replace(',', '.')}-nccl{nccl.library_version}",
                summary=f"Gloo + NCCL {nccl.library_version} ({nccl.source}: {nccl.library}), "
                        f"CUDA {found.nvcc_version}, sm {cc_list}",
                nccl=nccl)


def cuda_archs(found: Toolchain) -> list[int] | BuildRefusal:
    """The compute capabilities to build kernels for: the user's list, else torch's."""
    if found.cc_env:
        origin, wanted = "HOROVOD_BUILD_CUDA_CC_LIST", _arch_numbers(found.cc_env.split(","))
    elif found.arch_env:
        origin, wanted = "TORCH_CUDA_ARCH_LIST", _arch_numbers(re.split(r"[;\s]+", found.arch_env))
    else:
        origin, wanted = f"torch {found.torch}", _arch_numbers(found.torch_archs)
    if not wanted:
        return BuildRefusal(f"no CUDA architecture found in {origin}: set TORCH_CUDA_ARCH_LIST "
                            "to your GPUs' compute capability, e.g. 9.0")
    known = set(found.nvcc_archs)
    usable = [cc for cc in wanted if not known or cc in known]
    if not usable:
        listed = ",".join(str(cc) for cc in wanted)
        return BuildRefusal(f"nvcc {found.nvcc_version} can build none of the CUDA archs of "
                            f"{origin} ({listed}): set TORCH_CUDA_ARCH_LIST, e.g. 9.0")
    return usable


def _arch_numbers(entries: tuple[str, ...] | list[str]) -> list[int]:
    """"sm_90a", "compute_120", "8.6+PTX", "9.0", "90", "Hopper" -> sorted distinct numbers."""
    numbers: set[int] = set()
    for entry in entries:
        entry = entry.strip().lower().removesuffix("+ptx")
        if entry in ARCH_NAMES:
            numbers.update(ARCH_NAMES[entry])
        elif match := re.fullmatch(r"(?:sm_|compute_)?(\d+)(?:\.(\d))?[af]?", entry):
            numbers.add(int(match[1] + (match[2] or "")))
    return sorted(numbers)


def choose_nccl(found: Toolchain) -> Nccl | BuildRefusal:
    """One NCCL for header and library: the one torch loads, else the wheel, else the system's."""
    candidates = [n for n in (found.nccl_wheel, found.nccl_system) if n and n.library]
    if found.nccl_loaded:
        chosen = next((n for n in candidates if n.library == found.nccl_loaded), None)
        if chosen is None:
            return BuildRefusal(f"torch loads NCCL from {found.nccl_loaded}, which no NCCL found "
                                "here matches: set HOROVOD_NCCL_HOME to that NCCL's folder")
    elif candidates:
        chosen = candidates[0]
    else:
        major = version_tuple(found.torch_cuda)[0]
        return BuildRefusal(f"NCCL not found: pip install nvidia-nccl-cu{major}, or set "
                            "HOROVOD_NCCL_HOME to an NCCL folder (include/nccl.h, lib/libnccl.so)")
    if not chosen.include_dir:
        return BuildRefusal(f"no nccl.h for the NCCL torch uses ({chosen.library}): reinstall "
                            "that NCCL with its headers, or set HOROVOD_NCCL_HOME to one")
    if chosen.header_version and chosen.library_version and \
            chosen.header_version != chosen.library_version:
        return BuildRefusal(f"NCCL header/library mismatch: nccl.h {chosen.header_version} in "
                            f"{chosen.include_dir}, library {chosen.library_version} at "
                            f"{chosen.library}: point HOROVOD_NCCL_HOME at one NCCL")
    return chosen


def _rocm(found: Toolchain) -> _Gpu | BuildRefusal:
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
    return _Gpu(env=env, key=f"rocm{toolkit}", summary=f"Gloo + RCCL, ROCm {toolkit}")


_FAILURES = (
    (r"Compatibility with CMake < 3\.5 has been removed",
     "CMake 4 refused an old cmake_minimum_required (CMAKE_POLICY_VERSION_MINIMUM=3.5 unset?)"),
    (r"unsupported GNU version", "nvcc does not support this g++: load a GCC your CUDA supports"),
    (r"Could NOT find NCCL", "CMake found no NCCL (nccl.h and libnccl.so)"),
    (r'Unknown CMake command "hip_add_library"', "ROCm 6's HIP has no hip_add_library"),
    (r"Killed signal terminated program|cc1plus: out of memory",
     "the compiler was killed (out of memory?): retry with MAKEFLAGS=-j2"),
    (r"fatal error: ([\w./+-]+): No such file or directory", "missing header {0}"),
    (r"error: [‘']([\w:]+)[’'] (?:in namespace [‘']std[’'] does not name a type|is not a "
     r"member of [‘']std[’']|does not name a type|was not declared in this scope)",
     "{0} is undeclared (a missing #include?)"),
    (r"No CMAKE_(?:CXX|CUDA)_COMPILER could be found", "CMake found no compiler"),
    (r"No matching distribution found for (\S+)",
     "pip found no {0} (offline: is it in the wheelhouse?)"),
    (r"nvcc fatal\s*:\s*(.+)", "nvcc: {0}"),
    (r"CMake Error at ([^\n]+?):?\n\s*(.+)", "CMake error at {0}: {1}"),
    (r"error: (?!subprocess-exited-with-error)(.+)", "{0}"),
)


def summarize_failure(log: str) -> str:
    """The first known cause in a failed build's output, as one short phrase."""
    for pattern, message in _FAILURES:
        match = re.search(pattern, log)
        if match:
            return message.format(*(group.strip() for group in match.groups() if group))[:200]
    return "no known cause found"
