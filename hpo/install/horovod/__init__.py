"""Horovod 0.28.1 built against this Python's torch: CPU (Gloo), CUDA (Gloo + NCCL) or ROCm 5.

toolchain (the records) <- probe, nccl, cuda_wheels (this machine) <- cuda, plan (the pure
decision) <- build, cache, verify (carrying it out) <- install (the command's flow).
"""

from __future__ import annotations

from hpo.install.horovod.install import main
from hpo.install.horovod.plan import decide
from hpo.install.horovod.toolchain import HOROVOD_VERSION

__all__ = ["HOROVOD_VERSION", "decide", "main"]
