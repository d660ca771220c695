"""Helpers for data-parallel trainables, written once for Horovod, torch DDP and one process.

Inside a trial with `distributed:` every rank runs the trainable with its backend already
initialised (hpo calls `hvd.init()` or `torch.distributed.init_process_group`); without it the
same calls describe a single process, so one trainable serves all three.

Example:
    >>> from hpo import dist
    >>> model, optimizer = dist.prepare(model, optimizer)   # same start, averaged gradients
    >>> batch = dist.local_batch_size(config["batch_size"])  # the global batch, split
    >>> loss = dist.allreduce_mean(loss)                     # a metric averaged over ranks
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

Backend = Literal["horovod", "ddp", "none"]
_backend: Backend = "none"


def init(backend: Backend) -> None:
    """Initialise the rank's backend (hpo calls this before the trainable; idempotent)."""
    global _backend
    if backend == "horovod":
        import horovod.torch as hvd

        hvd.init()
    elif backend == "ddp":
        import torch.distributed as tdist

        if not tdist.is_initialized():
            tdist.init_process_group("nccl" if _cuda_rank() else "gloo")
    _backend = backend


def shutdown() -> None:
    """Leave the process group (DDP) so the next trial in this process starts clean."""
    global _backend
    if _backend == "ddp":
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
    # Ray gives a DDP rank only its own GPU; Horovod ranks see the node's GPUs.
    index = local_rank() if _backend == "horovod" else 0
    return torch.device("cuda", index % torch.cuda.device_count())


def local_batch_size(global_batch: int) -> int:
    """This rank's share of the global batch size (the hyperparameter users tune)."""
    ranks = size()
    if global_batch % ranks:
        raise ValueError(f"global batch size {global_batch} does not split evenly over "
                         f"{ranks} ranks; search over multiples of {ranks}")
    return global_batch // ranks


def prepare(model: torch.nn.Module, optimizer: torch.optim.Optimizer
            ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """All ranks start from rank 0's weights and optimizer state; gradients are averaged.

    Load a checkpoint before calling this. Save `unwrap(model).state_dict()` so checkpoints
    load under any backend.
    """
    if _backend == "horovod":
        import horovod.torch as hvd

        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer,
                                             named_parameters=model.named_parameters())
    elif _backend == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        on_gpu = next(model.parameters()).is_cuda
        model = DistributedDataParallel(model, device_ids=[device()] if on_gpu else None)
        _broadcast_optimizer_state(optimizer)
    return model, optimizer


def _broadcast_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    import torch.distributed as tdist

    state = [optimizer.state_dict() if is_main() else None]
    tdist.broadcast_object_list(state, src=0)
    optimizer.load_state_dict(state[0])


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside a DDP wrapper (itself otherwise)."""
    return getattr(model, "module", model) if _backend == "ddp" else model


def allreduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Element-wise sum over ranks (e.g. confusion counts for F1 on sharded validation)."""
    if _backend == "horovod":
        import horovod.torch as hvd

        return hvd.allreduce(tensor, op=hvd.Sum)
    if _backend == "ddp":
        import torch.distributed as tdist

        tensor = tensor.clone()
        tdist.all_reduce(tensor)
    return tensor


def allreduce_mean(value: Any) -> float:
    """A scalar averaged over ranks, as a float ready for `hpo.report`."""
    import torch

    total = allreduce_sum(torch.as_tensor(float(value), dtype=torch.float64))
    return float(total) / size()


def shard(items: int, epoch: int, seed: int = 0) -> torch.Tensor:
    """This rank's indices of an epoch's shuffled order; every rank gets as many."""
    import torch

    order = torch.randperm(items, generator=torch.Generator().manual_seed(seed * 100003 + epoch))
    usable = items - items % size()
    return order[rank():usable:size()]
