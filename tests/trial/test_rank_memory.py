"""Whether a warm rank may serve the next trial on a GPU (trial/ranks/fresh.py): what torch keeps by
design (a matmul's cuBLAS workspace, cached blocks) is freed first and does not count; a tensor
a trial left behind does. GPU memory readings are injected: this machine has no GPU (the real
check: python -m benchmarks rank-reuse --device cuda, and tests/support/gpu_rank_memory.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from hpo import dist
from hpo.trial.ranks import fresh
from hpo.trial.ranks.rank import RankEnd

MIB = 1 << 20


@dataclass
class _Gpu:
    """One GPU as torch's allocator reports it: live tensors, and a cuBLAS workspace that
    torch._C._cuda_clearCublasWorkspaces frees."""

    tensors: int = 0
    workspace: int = 0
    initialized: bool = True

    def clear_workspaces(self) -> None:
        self.workspace = 0


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> _Gpu:
    found = _Gpu()
    for name, value in {"is_available": lambda: True,
                        "is_initialized": lambda: found.initialized,
                        "synchronize": lambda: None, "empty_cache": lambda: None,
                        "device_count": lambda: 1,
                        "memory_allocated": lambda i: found.tensors + found.workspace}.items():
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", found.clear_workspaces,
                        raising=False)  # a CPU build lacks it
    return found


@pytest.mark.parametrize(("tensors", "workspace", "idle", "backend_down", "reused"), [
    (0, 8 * MIB, 0, True, True),  # a trial that ran a matmul: only the workspace is left
    (0, 0, 0, True, True),
    (4096, 0, 0, True, False),  # a CUDA tensor in a global list: the next trial would see it
    (4096, 8 * MIB, 0, True, False),
    (512, 8 * MIB, 512, True, True),  # held before the first trial too: the idle baseline
    (1024, 0, 512, True, False),
    (0, 8 * MIB, 0, False, False),  # its backend still up: not ready to init again
])
def test_a_rank_is_reused_unless_its_trial_left_gpu_memory(
        gpu: _Gpu, tensors: int, workspace: int, idle: int, backend_down: bool,
        reused: bool) -> None:
    gpu.tensors, gpu.workspace = tensors, workspace
    end = RankEnd(pid=1, stopped=False, backend_down=backend_down,
                  cuda_bytes=fresh.held_cuda_bytes(), idle_cuda_bytes=idle)
    assert end.clean == reused
    assert gpu.workspace == 0  # freed before the reading


def test_a_rank_that_never_used_its_gpu_holds_nothing(gpu: _Gpu) -> None:
    gpu.initialized, gpu.tensors = False, 4096  # not initialised: never read
    assert fresh.held_cuda_bytes() == 0


def test_a_cpu_rank_holds_nothing() -> None:
    assert fresh.held_cuda_bytes() == 0 and fresh.reusable(True, 0, 0)


def test_the_idle_baseline_is_read_once_with_the_backend_up(
        gpu: _Gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fresh, "_idle", None)
    gpu.tensors = 512  # held before any trial (a backend's own buffer)
    fresh.settle()
    gpu.tensors = 4096
    fresh.settle()  # a later trial: the baseline stays
    assert fresh.idle_cuda_bytes() == 512


def test_a_ddp_models_gradient_buckets_are_allowed_and_nothing_more() -> None:
    """torch keeps a DDP model's gradient buckets after the model is gone (H100, torch 2.11:
    289,280 bytes for this model, its 288,936 gradient bytes rounded to 512): allowed; a
    tensor beyond them is not."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 30 * 30, 10))
    allowed = dist.gradient_bucket_bytes(model)
    assert 289_280 <= allowed < 289_280 + 4 * 512
    assert fresh.reusable(True, 289_280, 0 + allowed)
    assert not fresh.reusable(True, 289_280 + 4096, 0 + allowed)
    frozen = torch.nn.Linear(10, 10).requires_grad_(False)
    assert dist.gradient_bucket_bytes(frozen) == 0  # no gradients, no buckets


def test_the_ddp_allowance_starts_at_zero_with_each_trial() -> None:
    dist._ddp_bucket_bytes = 4096  # an earlier trial's
    dist.init("none")
    assert dist.ddp_bucket_bytes() == 0
