"""Helpers for data-parallel trainables, written once for Horovod, torch DDP and one process.

Inside a trial with `distributed:` every rank runs the trainable with its backend already
initialised (hpo calls `hvd.init()` or `torch.distributed.init_process_group`); without it the
same calls describe a single process, so one trainable serves all three.

Rank invariance: with `batches` (rows drawn from one global order, a function of seed, epoch
and global step) and `prepare` (averaged gradients), 1, 2 or 4 ranks take the same steps on
the same samples, so a config means the same on any number of ranks.

Example:
    >>> from hpo import dist
    >>> model, optimizer = dist.prepare(model, optimizer)   # same start, averaged gradients
    >>> for rows in dist.batches(len(x), epoch, config["batch_size"], seed, x.device):
    ...     loss = loss_fn(model(x[rows]), y[rows])          # this rank's share of the step
    >>> loss = dist.allreduce_mean(loss)                     # a metric averaged over ranks
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from hpo.errors import ConfigError

if TYPE_CHECKING:
    import torch

Backend = Literal["horovod", "ddp", "none"]
_backend: Backend = "none"
# GPU bytes of the DDP gradient buckets made since init: torch 2.11 keeps a Reducer's buckets
# allocated after its model is gone (measured on an H100: 289,280 bytes for a model of 288,936
# gradient bytes, the same after every trial, not growing), so a warm rank may hold them.
_ddp_bucket_bytes = 0
_BLOCK = 512  # the CUDA caching allocator's rounding


def init(backend: Backend) -> None:
    """Initialise the rank's backend (hpo calls this before the trainable; idempotent)."""
    global _backend, _ddp_bucket_bytes
    _ddp_bucket_bytes = 0
    if backend == "horovod":
        import horovod.torch as hvd

        hvd.init()
    elif backend == "ddp":
        import torch.distributed as tdist

        if not tdist.is_initialized():
            tdist.init_process_group("nccl" if _cuda_rank() else "gloo")
    _backend = backend


def shutdown() -> None:
    """Leave the backend (Horovod's ring, DDP's process group) so that the next trial in this
    process can init it again: a warm rank serves many trials (hpo.trial.ranks.pool). A rank that
    leaves first makes the others' next collective fail at once, not hang."""
    global _backend
    if _backend == "horovod":
        import horovod.torch as hvd

        hvd.shutdown()  # no-op when not initialised; hvd.init() works again afterwards
    elif _backend == "ddp":
        import torch.distributed as tdist

        if tdist.is_initialized():
            tdist.destroy_process_group()
    _backend = "none"


def backend() -> Backend:
    return _backend


def rank() -> int:
    if _backend == "horovod":
        import horovod.torch as hvd

        return int(hvd.rank())
    return int(os.environ.get("RANK", 0)) if _backend == "ddp" else 0


def size() -> int:
    if _backend == "horovod":
        import horovod.torch as hvd

        return int(hvd.size())
    return int(os.environ.get("WORLD_SIZE", 1)) if _backend == "ddp" else 1


def local_rank() -> int:
    if _backend == "horovod":
        import horovod.torch as hvd

        return int(hvd.local_rank())
    return int(os.environ.get("LOCAL_RANK", 0)) if _backend == "ddp" else 0


def is_main() -> bool:
    """True on rank 0, the rank whose reports reach the scheduler."""
    return rank() == 0


def _cuda_rank() -> bool:
    import torch

    return torch.cuda.is_available()


def device() -> torch.device:
    """This rank's device: its GPU when it has one, else the CPU."""
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    # Ray sets a rank actor's CUDA_VISIBLE_DEVICES to its own GPU: index 0. Horovod's
    # RayExecutor then widens it to its ranks' GPUs on the node in local-rank order (for CUDA
    # IPC); the modulo covers AMD, where Ray's HIP_VISIBLE_DEVICES (read first) names one GPU.
    index = local_rank() if _backend == "horovod" else 0
    return torch.device("cuda", index % torch.cuda.device_count())


def local_batch_size(global_batch: int, key: str = "batch_size") -> int:
    """This rank's share of the global batch size (the hyperparameter users tune); `key` is
    the config key that set it, named in the error when it does not split."""
    ranks = size()
    if global_batch % ranks:
        raise ConfigError("trial config", key, f"global batch {global_batch} does not split "
                          f"over distributed.workers={ranks} ranks",
                          f"use a multiple of {ranks}, or change distributed.workers")
    return global_batch // ranks


def prepare(model: torch.nn.Module, optimizer: torch.optim.Optimizer
            ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """All ranks start from rank 0's weights and optimizer state; gradients are averaged.

    Load a checkpoint before calling this. Save `unwrap(model).state_dict()` so checkpoints
    load under any backend.
    """
    if _backend == "horovod":
        import horovod.torch as hvd

        # Rank 0's optimizer state, loaded into the wrapper: it is a new optimizer over the
        # same parameters with empty state (a restored trial's momentum would be lost), and
        # hvd.broadcast_optimizer_state would fill a fresh one with a zero-gradient step
        # (Adam's step count, SGD's weight-decay momentum) that DDP and one process lack.
        state = hvd.broadcast_object(optimizer.state_dict(), root_rank=0)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer,
                                             named_parameters=model.named_parameters())
        optimizer.load_state_dict(state)
    elif _backend == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        on_gpu = next(model.parameters()).is_cuda
        model = DistributedDataParallel(model, device_ids=[device()] if on_gpu else None)
        _broadcast_optimizer_state(optimizer)
        if on_gpu:
            global _ddp_bucket_bytes
            _ddp_bucket_bytes += gradient_bucket_bytes(model)
    return model, optimizer


def gradient_bucket_bytes(model: torch.nn.Module) -> int:
    """At most what DDP's gradient buckets of `model` take on the GPU: its gradients' bytes,
    plus the allocator's rounding for each (a bucket holds one or more of them)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return sum(p.numel() * p.element_size() for p in params) + _BLOCK * len(params)


def ddp_bucket_bytes() -> int:
    """GPU bytes that the DDP models of this rank's trial may leave allocated by design."""
    return _ddp_bucket_bytes


def _broadcast_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    import torch.distributed as tdist

    state = [optimizer.state_dict() if is_main() else None]
    tdist.broadcast_object_list(state, src=0)
    optimizer.load_state_dict(state[0])


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside a DDP wrapper (itself otherwise)."""
    return getattr(model, "module", model) if _backend == "ddp" else model


def allreduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Element-wise sum over ranks (e.g. confusion counts for F1 on sharded validation), on
    the tensor's device."""
    if _backend == "horovod":
        import horovod.torch as hvd

        return hvd.allreduce(tensor, op=hvd.Sum)
    if _backend == "ddp":
        import torch.distributed as tdist

        # NCCL reduces GPU tensors only: a CPU tensor goes to the rank's GPU and back.
        home = tensor.device
        moved = tensor.to(device()) if tdist.get_backend() == "nccl" else tensor.clone()
        tdist.all_reduce(moved)
        tensor = moved.to(home)
    return tensor


def allreduce_mean(value: Any) -> float:
    """A scalar (number or one-element tensor, on any device) averaged over ranks, as a
    float ready for `hpo.report`: one host sync."""
    import torch

    scalar = torch.as_tensor(value).detach().reshape(()).to(torch.float64)
    return float(allreduce_sum(scalar)) / size()


def epoch_order(items: int, epoch: int, seed: int = 0,
                device: torch.device | str | None = None) -> torch.Tensor:
    """The epoch's shuffled order of all rows, the same on every rank: a function of (seed,
    epoch) only, drawn on the CPU so every device and rank count gets the same one."""
    import torch

    generator = torch.Generator().manual_seed(seed * 100003 + epoch)
    return torch.randperm(items, generator=generator).to(device or "cpu")


def rank_rows(order: torch.Tensor, offset: int, global_batch: int,
              key: str = "batch_size") -> torch.Tensor:
    """This rank's share of the global batch that starts at `offset` in the epoch's order:
    the ranks' shares together are exactly `order[offset:offset + global_batch]`, so a global
    step sees the same samples on any number of ranks (also when the batch changes
    mid-epoch: keep `offset` as the rows consumed so far)."""
    local = local_batch_size(global_batch, key)
    begin = offset + rank() * local
    return order[begin:begin + local]


def batches(items: int, epoch: int, global_batch: int, seed: int = 0,
            device: torch.device | str | None = None,
            key: str = "batch_size") -> Iterator[torch.Tensor]:
    """This rank's rows for each global step of an epoch (the last partial global batch is
    dropped, so every rank takes as many steps), as index tensors on `device`."""
    order = epoch_order(items, epoch, seed, device)
    for step in range(items // global_batch):
        yield rank_rows(order, step * global_batch, global_batch, key)


def shard(items: int, epoch: int, seed: int = 0) -> torch.Tensor:
    """This rank's indices of an epoch's shuffled order (every `size()`-th of `epoch_order`);
    every rank gets as many. Consecutive slices of `local_batch_size` rows give the same
    samples per global step on any rank count; `batches` does that for you."""
    order = epoch_order(items, epoch, seed)
    usable = items - items % size()
    return order[rank():usable:size()]
