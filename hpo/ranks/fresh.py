"""What one trial leaves behind in a rank process, undone before the next trial runs there.

A warm rank (hpo.ranks.pool) serves trial after trial; each starts as in a new process:
random generators as a new process has them (torch's at its fixed default seed, Python's
and NumPy's seeded from the OS); the environment, working directory, default dtype and grad
mode as they were. After the trial its objects are collected and the CUDA memory they held
must be free again, or the rank is not handed on. (The trainable's own module globals start
fresh too: hpo ships a trainable from a file by value, a new copy with each trial.)
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


def leftover_cuda_bytes() -> int:
    """CUDA memory still held by tensors once the trial's objects are collected (0 on a
    CPU rank): anything above 0 is state the next trial would inherit."""
    gc.collect()
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return 0
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return sum(torch.cuda.memory_allocated(index) for index in range(torch.cuda.device_count()))
