"""The CUDA part of the decision: which nvcc, which archs, which one NCCL. Pure, like plan.py.

Refusals name the missing piece and the fix in one line, and come before anything is built:
a GPU build asked of a torch without CUDA, a CUDA major other than torch's, an arch torch has
no kernels for or nvcc cannot build, an nvcc that refuses the host compiler, a mixed NCCL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpo.install.horovod.toolchain import BuildRefusal, Nccl, Request, Toolchain, version_tuple

DDP_HINT = "or train with `distributed: {backend: ddp}` instead"
# TORCH_CUDA_ARCH_LIST also takes names (torch.utils.cpp_extension's table).
ARCH_NAMES = {
    "turing": (75,), "ampere": (80, 86), "ada": (89,), "hopper": (90,), "blackwell": (100, 120),
}
WHEEL_NVCC = re.compile(r"/nvidia/[^/]+/bin/nvcc$")  # nvidia/cu13/bin, nvidia/cuda_nvcc/bin


@dataclass(frozen=True)
class Gpu:
    env: dict[str, str]
    key: str
    summary: str
    nccl: Nccl | None = None
    cuda_wheels: bool = False


def check_request(found: Toolchain, request: Request) -> str | None:
    """Bad input, refused before the toolchain is looked at further."""
    if request.cuda is None:
        if request.archs and not found.torch_cuda:
            return (f"--arch {request.archs}: torch {found.torch} is not a CUDA build; install "
                    "a CUDA build of torch, then run with --cuda")
        return None
    if found.torch_hip:
        return (f"--cuda: torch {found.torch} is a ROCm build (HIP {found.torch_hip}): run "
                "without --cuda to build with RCCL")
    if not found.torch_cuda:
        return (f"--cuda: torch {found.torch} has no CUDA (torch.version.cuda is None): install "
                "a CUDA build of torch first (PyPI's Linux torch is one), then run again")
    wanted = version_tuple(request.cuda.removesuffix(".x"))
    if request.cuda != "torch" and not wanted:
        return f"--cuda {request.cuda}: expected a CUDA version such as 13, 12.x or 13.0"
    if wanted and wanted[0] != version_tuple(found.torch_cuda)[0]:
        return (f"--cuda {request.cuda} differs from torch {found.torch}'s CUDA "
                f"{found.torch_cuda}: install torch's CUDA {wanted[0]} build, or ask for "
                f"--cuda {version_tuple(found.torch_cuda)[0]}")
    if request.archs:
        numbers = _arch_numbers(re.split(r"[;,\s]+", request.archs))
        if not numbers:
            return f"--arch {request.archs}: expected compute capabilities such as 80,90 or 9.0"
        return _foreign(numbers, "--arch", found)
    return None


def _foreign(wanted: list[int], origin: str, found: Toolchain) -> str | None:
    foreign = [cc for cc in wanted if not torch_runs(cc, found.torch_archs)]
    if not foreign:
        return None
    return (f"torch {found.torch} cannot run on sm {','.join(str(cc) for cc in foreign)} of "
            f"{origin} (built for {' '.join(found.torch_archs)}): pick archs it has kernels for")


def cuda_build(found: Toolchain, request: Request) -> Gpu | BuildRefusal:
    # Horovod compiles its kernels as C++11 (CMAKE_CUDA_STANDARD 11). nvcc 13 still takes
    # -std=c++11, and cuda_kernels.cu includes only cuda_runtime.h and cuda_fp16.h.
    refused = _check_nvcc(found)
    if refused:
        return BuildRefusal(refused)
    archs = cuda_archs(found, request)
    if isinstance(archs, BuildRefusal):
        return archs
    nccl = choose_nccl(found)
    if isinstance(nccl, BuildRefusal):
        return nccl
    assert found.nvcc  # _check_nvcc
    cc_list = ",".join(str(cc) for cc in archs)
    env = {
        "HOROVOD_GPU": "CUDA",
        "HOROVOD_GPU_OPERATIONS": "NCCL",
        "HOROVOD_CUDA_HOME": found.nvcc.rsplit("/bin/", 1)[0],
        "HOROVOD_BUILD_CUDA_CC_LIST": cc_list,  # 0.28.1 ignores CMAKE_CUDA_ARCHITECTURES
        "HOROVOD_NCCL_LINK": "SHARED",  # the .so torch loads, not a second static copy
    }
    wheels = bool(WHEEL_NVCC.search(found.nvcc))
    return Gpu(env=env,
               key=f"cuda{found.torch_cuda}-sm{cc_list.replace(',', '.')}-"
                   f"nccl{nccl.library_version}",
               summary=f"Gloo + NCCL {nccl.library_version} ({nccl.source}: {nccl.library}), "
                       f"CUDA {found.nvcc_version}{' (PyPI wheels)' * wheels}, sm {cc_list}",
               nccl=nccl, cuda_wheels=wheels)


def _check_nvcc(found: Toolchain) -> str | None:
    cuda, major = found.torch_cuda, version_tuple(found.torch_cuda)[:1]
    if not found.nvcc:
        return (f"nvcc not found: torch {found.torch} is a CUDA {cuda} build; run with --cuda "
                f"(nvcc from PyPI's wheels), load a CUDA {major[0]} toolkit (module load CUDA) "
                f"or set HOROVOD_CUDA_HOME, {DDP_HINT}")
    if found.nvcc_version and version_tuple(found.nvcc_version)[:1] != major:
        return (f"nvcc {found.nvcc_version} ({found.nvcc}) does not match torch's CUDA {cuda}: "
                f"run with --cuda, load a CUDA {major[0]} toolkit or set HOROVOD_CUDA_HOME")
    if found.nvcc_host_error:
        return (f"nvcc {found.nvcc_version} refuses {found.cxx_id} {found.cxx_version} "
                f"({found.nvcc_host_error}): load a compiler it supports (module load GCC) "
                "or set CXX")
    return None


def cuda_archs(found: Toolchain, request: Request) -> list[int] | BuildRefusal:
    """The compute capabilities to build kernels for: the user's list, else torch's."""
    if request.archs:
        origin, wanted = "--arch", _arch_numbers(re.split(r"[;,\s]+", request.archs))
    elif found.cc_env:
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
    listed = ",".join(str(cc) for cc in wanted)
    if not usable:
        return BuildRefusal(f"nvcc {found.nvcc_version} can build none of the CUDA archs of "
                            f"{origin} ({listed}): choose among "
                            f"{','.join(str(cc) for cc in sorted(known))}, e.g. --arch 90")
    if origin.startswith("torch"):
        return usable  # torch's own list, less what this nvcc lacks
    if usable != wanted:
        return BuildRefusal(f"nvcc {found.nvcc_version} cannot build sm "
                            f"{','.join(str(cc) for cc in wanted if cc not in usable)} of "
                            f"{origin} ({listed}): drop it, or use a CUDA toolkit that has it")
    foreign = _foreign(wanted, origin, found)
    return BuildRefusal(foreign) if foreign else usable


def torch_runs(cc: int, torch_archs: tuple[str, ...]) -> bool:
    """Whether torch has kernels for compute capability `cc`: a cubin of the same major and no
    newer minor (sm_86 runs on 8.9), or PTX of an older one (compute_120 JIT-compiles on 12.1).
    Unknown (no list): assumed so."""
    if not torch_archs:
        return True
    for entry in torch_archs:
        match = re.fullmatch(r"(sm|compute)_(\d+)[af]?", entry.strip().lower())
        if not match:
            continue
        built = int(match[2])
        if built <= cc and (match[1] == "compute" or built // 10 == cc // 10):
            return True
    return False


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
        # Pinned: an unpinned nvidia-nccl-cu13 is PyPI's newest, not the NCCL torch loads.
        wheel = found.nccl_pin or f"nvidia-nccl-cu{version_tuple(found.torch_cuda)[0]}==<the " \
            "version torch requires>"
        return BuildRefusal(f"NCCL not found: pip install '{wheel}', or set HOROVOD_NCCL_HOME "
                            "to an NCCL folder (include/nccl.h, lib/libnccl.so)")
    if not chosen.include_dir:
        return BuildRefusal(f"no nccl.h for the NCCL torch uses ({chosen.library}): reinstall "
                            "that NCCL with its headers, or set HOROVOD_NCCL_HOME to one")
    if chosen.header_version and chosen.library_version and \
            chosen.header_version != chosen.library_version:
        return BuildRefusal(f"NCCL header/library mismatch: nccl.h {chosen.header_version} in "
                            f"{chosen.include_dir}, library {chosen.library_version} at "
                            f"{chosen.library}: point HOROVOD_NCCL_HOME at one NCCL")
    return chosen
