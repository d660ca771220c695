"""A CUDA toolkit folder for Horovod's build, assembled from PyPI's CUDA wheels.

torch's CUDA builds bring the CUDA runtime and NCCL as wheels (nvidia-cuda-runtime,
nvidia-nccl-cu13); `cuda-toolkit[nvcc,cccl,crt,nvvm]==X` adds nvcc and the headers. Those
wheels lay CUDA out as site-packages/nvidia/cu13/{bin,include,lib,nvvm} (CUDA 12:
nvidia/cuda_nvcc/bin, nvidia/cuda_runtime/lib, ...), while nvcc and CMake expect one toolkit
folder with lib64/ beside bin/. `stage_toolkit` builds that folder out of symbolic links: bin/
holds links to each file (nvcc resolves `..` from its own folder, so bin/ itself must be real),
lib64/ links every library plus the unversioned names a linker asks for (libcudart.so), and
include/ and nvvm/ are links. Nothing is copied; the folder is thrown away after the build.
"""

from __future__ import annotations

import importlib.util
import re
from importlib import metadata
from pathlib import Path

# The toolchain wheels a GPU build needs besides torch's own: nvcc (with its cicc and crt,
# which nvidia-cuda-nvcc itself requires unpinned: pip would otherwise take the newest CUDA's)
# and CCCL (thrust, cub, libcudacxx).
TOOLKIT_EXTRAS = "nvcc,cccl,crt,nvvm"


def nvidia_roots() -> list[Path]:
    """The site-packages/nvidia folders of this Python (a namespace package: maybe several)."""
    spec = importlib.util.find_spec("nvidia")
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def wheel_nvcc(roots: list[Path] | None = None) -> Path | None:
    """nvcc from the nvidia-cuda-nvcc wheel: nvidia/cu13/bin/nvcc or nvidia/cuda_nvcc/bin/nvcc."""
    for root in nvidia_roots() if roots is None else roots:
        for nvcc in sorted(root.glob("*/bin/nvcc")):
            if nvcc.is_file():
                return nvcc
    return None


def toolkit_pin(cuda: str | None, requirements: list[str] | None = None) -> str | None:
    """The `cuda-toolkit[...]` requirement matching the installed torch's CUDA `cuda`.

    torch >= 2.10 requires `cuda-toolkit[cudart,...]==13.0.2`: the same release. Older CUDA
    builds name `nvidia-cuda-runtime-cu12==12.8.90`, a component's version, not the toolkit's:
    those (and a torch that names neither, a site's own build) get torch's CUDA minor, `==12.8.*`.
    """
    for requirement in _torch_requirements(requirements):
        match = re.match(r"cuda-toolkit\s*(?:\[[^]]*\])?\s*==\s*([\d.]+)", requirement)
        if match:
            return f"cuda-toolkit[{TOOLKIT_EXTRAS}]=={match[1]}"
    minor = ".".join((cuda or "").split(".")[:2])
    return f"cuda-toolkit[{TOOLKIT_EXTRAS}]=={minor}.*" if minor else None


def nccl_pin(requirements: list[str] | None = None) -> str | None:
    """torch's own `nvidia-nccl-cuNN==X` requirement (the NCCL it loads), or None."""
    for requirement in _torch_requirements(requirements):
        match = re.match(r"(nvidia-nccl-cu\d+)\s*==\s*([\d.]+)", requirement)
        if match:
            return f"{match[1]}=={match[2]}"
    return None


def _torch_requirements(given: list[str] | None) -> list[str]:
    if given is not None:
        return given
    try:
        return metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return []


def stage_toolkit(nvcc: Path, home: Path) -> Path:
    """A CUDA home at `home` for the wheel toolkit that holds `nvcc`; returns `home`."""
    top = nvcc.parent.parent
    siblings = sorted(p for p in top.parent.glob("cuda_*") if p != top)  # CUDA 12's layout
    _link_entries(home / "bin", [nvcc.parent])
    _link_entries(home / "include", [top / "include", *(p / "include" for p in siblings)])
    lib64 = home / "lib64"
    _link_entries(lib64, [top / "lib", *(p / "lib" for p in siblings)])
    for library in sorted(lib64.iterdir()):
        unversioned = re.sub(r"\.so(\.\d+)+$", ".so", library.name)
        if unversioned != library.name:
            _link_once(lib64 / unversioned, library)
    (home / "lib").symlink_to("lib64")
    nvvm = next((p for p in (top / "nvvm", top.parent / "cuda_nvcc" / "nvvm") if p.is_dir()), None)
    if nvvm is not None:
        (home / "nvvm").symlink_to(nvvm.resolve())
    if not (home / "include" / "cuda_runtime.h").exists():
        raise FileNotFoundError(f"no cuda_runtime.h beside {nvcc}: pip install the "
                                "nvidia-cuda-runtime wheel of the same CUDA")
    return home


def _link_entries(folder: Path, sources: list[Path]) -> None:
    """A real `folder` holding a link to each entry of `sources`; the first source wins."""
    folder.mkdir(parents=True)
    for source in sources:
        if source.is_dir():
            for entry in sorted(source.iterdir()):
                _link_once(folder / entry.name, entry)


def _link_once(link: Path, target: Path) -> None:
    if not link.exists() and not link.is_symlink():
        link.symlink_to(target.resolve())
