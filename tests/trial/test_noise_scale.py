"""The gradient noise scale on 2 real DDP ranks (Gloo, CPU): the hook's norms are each rank's
own gradient and the mean's, computed here by hand; training with it takes the same steps as
DDP's default; B_noise follows McCandlish et al.'s estimator; the schedule's growth rule."""

from __future__ import annotations

import itertools
import os
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from calls import ROOT, trial_rows

import hpo
from hpo.errors import ConfigError
from hpo.spec.load import load_spec
from hpo.trial.large_batch import BatchSchedule, check_trial_config
from hpo.trial.noise_scale import NoiseScale, noise_scale

RANKS, LOCAL, STEPS = 2, 8, 3


def test_the_estimator_recovers_a_known_noise_scale() -> None:
    # |G_b|^2 = |G|^2 + S/b for a batch-b mean of examples with covariance trace S
    signal, trace = 0.5, 96.0
    small, large = signal + trace / 16, signal + trace / 64
    assert noise_scale(16, 64, small, large) == pytest.approx(trace / signal)
    assert noise_scale(16, 64, 1.0, 2.0) == 0.0  # the mean larger than the parts: no noise
    assert noise_scale(16, 64, 10.0, 0.1) is None  # no signal left: nothing to tell


def _data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    x = torch.randn(RANKS * LOCAL, 5, generator=generator)
    return x, x @ torch.arange(5.0) + torch.randn(RANKS * LOCAL, generator=generator)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _flat_grad(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    model.zero_grad()
    torch.nn.functional.mse_loss(model(x).squeeze(1), y).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _rank(rank: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(RANKS),
                      RANK=str(rank))
    from hpo.trial import dist

    dist.init("ddp")
    by_hand = _model()
    # buckets of a few parameters each: their callbacks add up concurrently (Gloo's threads)
    model = torch.nn.parallel.DistributedDataParallel(_model(), bucket_cap_mb=1e-5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    noise = NoiseScale.attach(model)
    small = large = 0.0
    for step in range(STEPS):
        x, y = _data(step)
        mine = slice(rank * LOCAL, (rank + 1) * LOCAL)
        parts = [_flat_grad(by_hand, x[r * LOCAL:(r + 1) * LOCAL], y[r * LOCAL:(r + 1) * LOCAL])
                 for r in range(RANKS)]
        mean = torch.stack(parts).mean(0)
        small += float(sum(p.square().sum() for p in parts)) / RANKS
        large += float(mean.square().sum())
        with torch.no_grad():  # the same SGD step by hand on the mean gradient
            offset = 0
            for p in by_hand.parameters():
                p -= 0.1 * mean[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x[mine]).squeeze(1), y[mine]).backward()
        optimizer.step()
    buckets = len(noise.large)
    sums = (float(noise.small) / STEPS, float(sum(noise.large.values())) / STEPS,
            float(noise.steps))
    measured = noise.measure(RANKS * LOCAL)
    if rank == 0:
        out.update(sums=sums, hand=(small / STEPS, large / STEPS), measured=measured,
                   expected=noise_scale(LOCAL, RANKS * LOCAL, small / STEPS, large / STEPS),
                   same=all(torch.allclose(a, b, atol=1e-6) for a, b in zip(
                       model.module.parameters(), by_hand.parameters(), strict=True)),
                   after=float(noise.steps), buckets=buckets)
    torch.distributed.barrier()  # neither leaves (rank 0 takes the store) while one still works
    if rank == 0:  # the store is rank 0's: it goes after rank 1 has shut down (rank 1 aborted
        deadline = time.monotonic() + 60  # twice in full suites, "terminate called without
        while "left" not in out and time.monotonic() < deadline:  # an active exception")
            time.sleep(0.01)
    dist.shutdown()
    if rank == 1:
        out["left"] = True


@pytest.mark.slow  # two real DDP rank processes
def test_two_ddp_ranks_measure_their_own_and_the_mean_gradient() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(port, out), nprocs=RANKS, join=True)
        found = dict(out)
    # rank 0's own norm, summed by its hook; by hand: the mean over both ranks' norms, so
    # compare the mean gradient's exactly and rank 0's through the allreduced estimate
    assert found["sums"][1] == pytest.approx(found["hand"][1], rel=1e-5)
    assert found["sums"][2] == STEPS
    assert found["measured"] == pytest.approx(found["expected"], rel=1e-5)
    assert found["same"]  # the hook's allreduce trains as DDP's default does
    assert found["after"] == 0  # a measure starts the next period afresh
    assert found["buckets"] > 1


def test_grow_noise_doubles_where_the_trainable_says_and_caps_at_max() -> None:
    schedule = BatchSchedule.from_config({"batch_schedule": {"start": 64, "max": 256,
                                                             "grow": "noise"}}, workers=2)
    assert [schedule.global_batch(e) for e in range(4)] == [64] * 4
    grown = schedule.grown(2).grown(3)
    assert [grown.global_batch(e) for e in range(5)] == [64, 64, 128, 256, 256]
    assert grown.grown(4) is grown and grown.first_epoch(4) == 3
    assert grown.lr(0.1, 2, 0, 1024) == pytest.approx(0.1)  # lr_rule none


@pytest.mark.parametrize(("config", "workers", "says"), [
    ({"grow": "noise", "double_every": 2}, 2, "batch_schedule.double_every: is an epoch rule"),
    ({"grow": "noise", "switch_at": 2}, 2, "batch_schedule.switch_at: is an epoch rule"),
    ({"grow": "noise"}, 1, "batch_schedule.grow: noise is measured from each rank's own"),
    ({"grow": "nois"}, 2, "batch_schedule.grow: unknown value 'nois'. Hint: did you mean "
                          "'noise'?"),
])
def test_grow_noise_is_refused_where_it_cannot_run(config: dict, workers: int,
                                                    says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_trial_config({"batch_schedule": config}, "space.yaml", workers)
    assert str(caught.value).startswith(f"space.yaml: {says}"), str(caught.value)


@pytest.mark.slow
def test_a_ddp_trial_doubles_its_batch_where_the_measured_noise_scale_passes_it(
        tmp_path: Path) -> None:
    """The example's recipe through `hpo run` on 2 Gloo ranks: every epoch reports the noise
    scale, and the next epoch's batch is twice this one's exactly where it passed the batch
    (below max)."""
    spec = load_spec(ROOT / "search_spaces/images-ddp-noise.yaml", [
        "num_samples=1", "constants.epochs=4", "scheduler.max_t=4", "scheduler.grace_period=4",
        "constants.train_size=2048", "constants.val_size=256"])
    hpo.run(spec, storage=str(tmp_path), source="images-ddp-noise.yaml", keep_ray=False)
    (rows,) = trial_rows(tmp_path / spec.name).values()
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4]
    for this, after in itertools.pairwise(rows):
        grows = this["noise_scale"] > this["global_batch"] and this["global_batch"] < 256
        assert after["global_batch"] == this["global_batch"] * (2 if grows else 1), rows
    assert all(r["noise_scale"] >= 0 for r in rows), rows  # measured every epoch (nan fails)
