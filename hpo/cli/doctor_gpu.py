"""`hpo doctor`'s GPU section: what a GPU run would use, and one line to fix each mismatch.

The facts are gathered once (probe_gpu) and judged by a pure function (gpu_rows), so every
judgement is tested without a GPU: the driver, torch's CUDA/ROCm build, the visible devices,
the NCCL torch loads against the one Horovod was built with, and the MIOpen cache on ROCm.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

Row = tuple[str, str, bool]  # (what, finding, fine)
VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
MIOPEN = ("MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR")


@dataclass(frozen=True)
class GpuFacts:
    """What this machine and installation have, as read by probe_gpu."""

    driver: str | None = None  # nvidia-smi / rocm-smi driver version
    torch_cuda: str | None = None  # torch.version.cuda
    torch_hip: str | None = None  # torch.version.hip
    devices: int = 0  # torch.cuda.device_count()
    torch_nccl: tuple[int, ...] | None = None  # the NCCL/RCCL torch loaded
    horovod: dict[str, int] | None = None  # gloo/nccl/rocm/mpi built (nccl: header version)
    env: Mapping[str, str] = field(default_factory=dict)


def _version_code(code: int) -> tuple[int, int]:
    """NCCL's NCCL_VERSION_CODE: 2.18.5 -> 21805 (since 2.9; before: 2405 for 2.4.5)."""
    return (code // 10000, code // 100 % 100) if code >= 10000 else (code // 1000,
                                                                      code // 100 % 10)


def gpu_rows(facts: GpuFacts) -> list[Row]:
    """Rows for the GPU section; a row that is not fine carries its one-line fix."""
    build = (f"CUDA {facts.torch_cuda}" if facts.torch_cuda else
             f"ROCm (HIP {facts.torch_hip})" if facts.torch_hip else "CPU only")
    rows: list[Row] = [("gpu driver", facts.driver or "none found (nvidia-smi/rocm-smi)", True),
                       ("torch GPU build", build, True)]
    visible = ", ".join(f"{k}={facts.env[k]}" for k in VISIBLE if k in facts.env) or "not set"
    rows.append(("gpus visible", f"{facts.devices} to torch; {visible}", True))
    if facts.devices and not (facts.torch_cuda or facts.torch_hip):
        rows.append(("torch build", "GPUs present but torch is a CPU build. Hint: install the "
                     "CUDA/ROCm build of torch (docs/install.md)", False))
    if "ROCR_VISIBLE_DEVICES" in facts.env and "HIP_VISIBLE_DEVICES" not in facts.env:
        rows.append(("rocr/hip", "ROCR_VISIBLE_DEVICES set without HIP_VISIBLE_DEVICES: Ray "
                     "2.60 refuses to start. Hint: `hpo slurm run` sets HIP for its Ray nodes; "
                     "by hand, export HIP_VISIBLE_DEVICES as 0..n-1", False))
    rows += _nccl_rows(facts)
    if facts.torch_hip:
        cache = ", ".join(f"{k}={facts.env[k]}" for k in MIOPEN if k in facts.env)
        rows.append(("miopen cache", cache or "default (~/.cache/miopen; a shared home can "
                     "lock it). Hint: hpo's Slurm jobs set a per-job cache", True))
    return rows


def _nccl_rows(facts: GpuFacts) -> list[Row]:
    loaded = ".".join(map(str, facts.torch_nccl)) if facts.torch_nccl else None
    rows: list[Row] = [("nccl (torch)", loaded or "not loaded (CPU build)", True)]
    built = (facts.horovod or {}).get("nccl", 0)
    if facts.horovod is None:
        return rows
    flags = ", ".join(k for k, v in facts.horovod.items() if v) or "none"
    rows.append(("horovod built", flags, True))
    gpu_torch = bool(facts.torch_cuda or facts.torch_hip)
    if gpu_torch and not built:
        rows.append(("horovod nccl", "Horovod has no NCCL/RCCL: GPU ranks would go through "
                     "Gloo. Hint: rebuild with `hpo install horovod --cuda --rebuild` (after the "
                     "GPU torch), or use backend: ddp", False))
    elif built and facts.torch_nccl and _version_code(built) != tuple(facts.torch_nccl[:2]):
        major, minor = _version_code(built)
        rows.append(("horovod nccl", f"built against NCCL {major}.{minor}, torch loads "
                     f"{loaded}. Hint: rebuild with `hpo install horovod --rebuild` (it uses "
                     "the NCCL torch loads)", False))
    return rows


def _smi_driver() -> str | None:
    for tool, args in (("nvidia-smi", ["--query-gpu=driver_version", "--format=csv,noheader"]),
                       ("rocm-smi", ["--showdriverversion"])):
        if shutil.which(tool):
            done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=20,
                                  check=False)
            lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
            if done.returncode == 0 and lines:
                return f"{tool}: {lines[-1]}"
    return None


def probe_gpu() -> GpuFacts:
    """Read the facts (imports torch and, when installed, horovod.torch)."""
    import torch

    nccl = None
    if torch.cuda.is_available() and torch.distributed.is_nccl_available():
        version = torch.cuda.nccl.version()
        nccl = tuple(version) if isinstance(version, tuple) else _version_code(int(version))
    horovod = None
    try:
        hvd = importlib.import_module("horovod.torch")
        horovod = {"gloo": int(hvd.gloo_built()), "nccl": int(hvd.nccl_built()),
                   "rocm": int(hvd.rocm_built()), "mpi": int(hvd.mpi_built())}
    except ImportError:
        pass
    return GpuFacts(_smi_driver(), torch.version.cuda, getattr(torch.version, "hip", None),
                    torch.cuda.device_count() if torch.cuda.is_available() else 0, nccl,
                    horovod, {k: v for k, v in os.environ.items() if k in VISIBLE + MIOPEN})
