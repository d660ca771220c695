"""What one trial leaves behind in a rank process, undone before the next trial runs there.

A warm rank (hpo.trial.ranks.pool) serves trial after trial; each starts as in a new process:
random generators as a new process has them (torch's at its fixed default seed, Python's
and NumPy's seeded from the OS); the environment, working directory, default dtype and grad
mode as they were. After the trial its objects are collected and the CUDA memory they held
must be free again, or the rank is not handed on. (The trainable's own module globals start
fresh too: hpo ships a trainable from a file by value, a new copy with each trial.) What torch
keeps allocated by design (cuBLAS workspaces, cached blocks) is freed before that check; the
gradient buckets of a trial's DDP models, which torch 2.11 keeps after the model is gone
(tests/support/gpu_rank_memory.py), are allowed for (hpo.trial.dist.ddp_bucket_bytes): they
are replaced, not added to, by the next trial's.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def trial_state() -> Iterator[None]:
    """Run one trial from a fresh process's state, and put the process's back afterwards."""
    import torch

    env, cwd = dict(os.environ), os.getcwd()
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    _reseed()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(env)
        with contextlib.suppress(OSError):  # a folder the trial removed
            os.chdir(cwd)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)


# torch seeds its default generator with a fixed value in every new process (an unseeded
# trainable draws the same on fresh ranks); the OS seeds Python's and NumPy's.
_TORCH_START_SEED = 67280421310721


def _reseed() -> None:
    import torch

    torch.manual_seed(_TORCH_START_SEED)  # every device, as at a process's start
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


_idle: int | None = None  # GPU bytes held with the backend up, before the first trial


def settle() -> None:
    """Once per process, with the backend up, before its first trial: record the GPU memory
    held then (the idle baseline: what the backend itself keeps)."""
    global _idle
    if _idle is None:
        _idle = held_cuda_bytes()


def idle_cuda_bytes() -> int:
    return _idle or 0


def held_cuda_bytes() -> int:
    """Bytes held by live tensors on this process's GPUs, after freeing what torch keeps by
    design: the cuBLAS workspaces (any matmul leaves one allocated, which would make no GPU
    rank reusable) and the caching allocator's unused blocks (cuDNN's workspaces among them)."""
    gc.collect()
    import torch

    cuda = torch.cuda
    if not (cuda.is_available() and cuda.is_initialized()):
        return 0
    cuda.synchronize()  # nothing in flight uses a workspace about to be freed
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)  # absent on CPU builds
    if clear is not None:
        clear()
    cuda.empty_cache()
    return sum(cuda.memory_allocated(index) for index in range(cuda.device_count()))


def reusable(backend_down: bool, held_bytes: int, idle_bytes: int) -> bool:
    """Whether a rank may serve the next trial: its backend shut down (ready to init again)
    and no more GPU memory held than before its first trial (more: a tensor a trial left in
    a global, which the next trial would inherit)."""
    return backend_down and held_bytes <= idle_bytes
