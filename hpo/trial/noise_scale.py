"""The gradient noise scale of a data-parallel trial, measured at no extra pass, and the batch
growth it asks for (`batch_schedule.grow: noise`).

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", appendix A.1): from
gradients of two batch sizes b < B, |G|^2 ~ (B |G_B|^2 - b |G_b|^2) / (B - b) and the trace
of the per-example covariance S ~ (|G_b|^2 - |G_B|^2) / (1/b - 1/B); B_noise = S / |G|^2 is
the batch beyond which a larger one buys little per step. On n ranks each rank's own gradient
is a batch-b estimate (b = B/n) and the allreduced mean a batch-B one: DDP has both in hand.
A communication hook (DDP's default allreduce, plus two squared norms summed on the device)
collects them during the epoch; `measure` reads them once at its end (one allreduce, one host
sync) and averages the two norms before the ratio, as the paper advises.

Example (the built-in trainables do this):
    >>> noise = NoiseScale.attach(model)          # after dist.prepare; None unless DDP
    >>> ...train an epoch...
    >>> noise.measure(global_batch)               # B_noise, or None (nothing measured yet)
"""

from __future__ import annotations

import math

import torch

from hpo.trial import dist


class NoiseScale:
    """Squared gradient norms of one trial's steps, small (each rank's) and large (the mean)."""

    def __init__(self, device: torch.device) -> None:
        self.small = torch.zeros((), dtype=torch.float64, device=device)  # sum of |g_rank|^2
        # sum of |g_mean|^2, one slot a bucket: the buckets' callbacks run at once (Gloo's
        # threads, CUDA streams), each only ever adding to its own slot
        self.large: dict[int, torch.Tensor] = {}
        self.steps = torch.zeros((), dtype=torch.float64, device=device)

    @classmethod
    def attach(cls, model: torch.nn.Module) -> NoiseScale | None:
        """Measure on a DDP model's gradient buckets; None for any other model (one process
        or Horovod: no per-rank gradient next to the mean)."""
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(model, DistributedDataParallel):
            return None
        noise = cls(next(model.parameters()).device)
        model.register_comm_hook(noise, _allreduce_measured)
        return noise

    def measure(self, global_batch: int) -> float | None:
        """B_noise from the steps since the last call (then forgotten); None when it cannot
        be told (no step, or a gradient whose signal drowned in the noise)."""
        ranks = dist.size()
        large = sum(self.large.values(), torch.zeros_like(self.small))
        totals = dist.allreduce_sum(torch.stack([self.small, large, self.steps]))
        small_sum, large_sum, steps = (float(x) for x in totals.cpu())
        for tally in (self.small, self.steps, *self.large.values()):
            tally.zero_()
        if steps == 0 or ranks < 2:
            return None
        # every rank added its own norm and the mean's at each of its steps
        return noise_scale(global_batch // ranks, global_batch, small_sum / steps,
                           large_sum / steps)


def noise_scale(small_batch: int, large_batch: int, small_sq: float,
                large_sq: float) -> float | None:
    """McCandlish et al.'s B_simple from mean squared gradient norms at two batch sizes."""
    b, big = float(small_batch), float(large_batch)
    signal = (big * large_sq - b * small_sq) / (big - b)
    trace = (small_sq - large_sq) / (1.0 / b - 1.0 / big)
    if signal <= 0 or not math.isfinite(signal):
        return None
    return max(trace, 0.0) / signal


def _allreduce_measured(state, bucket):  # noqa: ANN001, ANN202
    """DDP's default hook (the bucket divided by the rank count, allreduced) with this rank's
    squared norm before and the mean's after, summed on the device: no host sync. Not
    annotated: DDP compares a hook's annotations with its own classes, and this module's
    annotations are strings (a NoiseScale, a GradBucket; a Future of the bucket)."""
    import torch.distributed as tdist

    buffer = bucket.buffer()
    state.small += _squared_norm(buffer)
    if bucket.index() == 0:
        state.steps += 1
    buffer.div_(tdist.get_world_size())
    future = tdist.all_reduce(buffer, async_op=True).get_future()

    index = bucket.index()

    def measured(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        mean = done.value()[0]
        slot = state.large.get(index)
        if slot is None:  # first step: this bucket's own slot (a dict store holds the GIL)
            slot = state.large[index] = torch.zeros((), dtype=torch.float64, device=mean.device)
        slot += _squared_norm(mean)
        return mean

    return future.then(measured)


def _squared_norm(tensor: torch.Tensor) -> torch.Tensor:
    # accumulated in float32 at least: a bf16 bucket's squares would lose the small terms
    wide = torch.float32 if tensor.element_size() < 4 else tensor.dtype
    return torch.linalg.vector_norm(tensor, dtype=wide).to(torch.float64).square()
