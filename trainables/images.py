"""Built-in data-parallel trainable: a small CNN image classifier, single- or multi-label.

Runs the same on one process, on Horovod ranks and on DDP ranks (see `distributed:` in
search_spaces/images-horovod-asha.yaml): a config takes the same steps on any number of ranks.
Data is either a NumPy file (`data: path.npz` with x_train, y_train, x_val, y_val; images N x C
x H x W, labels as class ids or, for multi-label data such as BigEarthNet patches, as N x
classes 0/1 arrays) or a synthetic generator that needs no download (`data: synthetic`): every
class has its own texture (a grating of fixed frequency, angle and colour), an image is the sum
of its labels' textures at random phases plus noise.

Each epoch reports val_loss, val_f1_micro, val_f1_macro (and val_accuracy for single-label
data), train_loss, the global batch, the learning rate and train_s (the training steps' time),
with a checkpoint of model, optimizer and epoch; a restored trial continues exactly where it
stopped. The data stays on the rank's device and each epoch syncs with the host once.

Config keys (all optional): data ("synthetic"), multilabel (False), classes (10), channels (3),
image_size (16), train_size (4096), val_size (1024), noise (1.0), width (16), epochs (10),
seed (0), lr (0.05: the rate at lr_reference_batch), optimizer ("sgd" | "adam" | "adamw" |
"lars" | "lamb"), momentum (0.9), nesterov (False), weight_decay (0), precision ("fp32" |
"bf16": autocast), channels_last (False), and hpo.trial.large_batch's keys: batch_size (256, the
global batch), lr_reference_batch, batch_schedule {start, max, double_every | switch_at,
lr_rule, ramp_steps, warmup_steps, decay, decay_power}.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from typing import Any

import numpy as np
import torch
from torch import nn

import hpo
from hpo import dist
from hpo.errors import ConfigError
from hpo.trial.large_batch import (
    OPTIMIZERS,
    SOURCE,
    BatchSchedule,
    check_trial_config,
    make_optimizer,
    set_lr,
)
from hpo.trial.noise_scale import NoiseScale

DEFAULTS: dict[str, Any] = {
    "data": "synthetic", "multilabel": False, "classes": 10, "channels": 3, "image_size": 16,
    "train_size": 4096, "val_size": 1024, "noise": 1.0, "width": 16, "epochs": 10, "seed": 0,
    "lr": 0.05, "optimizer": "sgd", "momentum": 0.9, "nesterov": False, "weight_decay": 0.0,
    "precision": "fp32", "channels_last": False,
}
DEFAULT_BATCH = 256  # the global batch when neither batch_size nor batch_schedule.start is set
PRECISIONS = ("fp32", "bf16")
EVAL_CHUNK = 4096  # validation rows per forward pass: bounds the activations' memory
Arrays = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def synthetic(classes: int, channels: int, size: int, items: int, noise: float,
              multilabel: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Images that carry a grating per label (each class its own frequency, angle and colour,
    at a random phase per image) under Gaussian noise: texture that a CNN has to find."""
    shape = np.random.default_rng(1000 + classes)
    freq, angle = shape.uniform(1.0, 5.0, classes), shape.uniform(0, np.pi, classes)
    colour = shape.standard_normal((classes, channels)).astype(np.float32)
    yy, xx = np.mgrid[0:size, 0:size] / size
    wave = 2 * np.pi * freq[:, None, None] * (np.cos(angle)[:, None, None] * yy
                                               + np.sin(angle)[:, None, None] * xx)
    rng = np.random.default_rng(seed)
    if multilabel:
        labels = (rng.random((items, classes)) < 2.0 / classes).astype(np.float32)
        labels[np.arange(items), rng.integers(0, classes, items)] = 1.0  # at least one label
        active = labels
    else:
        labels = rng.integers(0, classes, items)
        active = np.eye(classes, dtype=np.float32)[labels]
    phase = rng.uniform(0, 2 * np.pi, active.shape)
    # sin(wave + phase) = sin(wave) cos(phase) + cos(wave) sin(phase)
    signal = (np.einsum("nk,kc,khw->nchw", active * np.cos(phase), colour, np.sin(wave))
              + np.einsum("nk,kc,khw->nchw", active * np.sin(phase), colour, np.cos(wave)))
    images = signal + noise * rng.standard_normal(signal.shape)
    return images.astype(np.float32), labels


@functools.lru_cache(maxsize=2)
def load_data(data: str, classes: int, channels: int, size: int, train_size: int,
              val_size: int, noise: float, multilabel: bool) -> Arrays:
    """(x_train, y_train, x_val, y_val), cached per process (every rank loads its own)."""
    if data == "synthetic":
        parts = [*synthetic(classes, channels, size, train_size, noise, multilabel, seed=1),
                 *synthetic(classes, channels, size, val_size, noise, multilabel, seed=2)]
    else:
        with np.load(data) as arrays:
            parts = [arrays[key] for key in ("x_train", "y_train", "x_val", "y_val")]
    x_train, y_train, x_val, y_val = (torch.from_numpy(np.asarray(part)) for part in parts)
    labels = torch.float32 if multilabel else torch.long
    return x_train.float(), y_train.to(labels), x_val.float(), y_val.to(labels)


def build_model(channels: int, classes: int, width: int) -> nn.Module:
    """Three conv blocks and a linear head; GroupNorm keeps it independent of the batch size."""
    def block(inputs: int, outputs: int) -> list[nn.Module]:
        return [nn.Conv2d(inputs, outputs, 3, padding=1), nn.GroupNorm(4, outputs), nn.ReLU()]

    return nn.Sequential(*block(channels, width), nn.MaxPool2d(2), *block(width, 2 * width),
                         nn.MaxPool2d(2), *block(2 * width, 4 * width),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, classes))


def _loss(multilabel: bool) -> nn.Module:
    return nn.BCEWithLogitsLoss() if multilabel else nn.CrossEntropyLoss()


def check_config(config: dict[str, Any], workers: int = 1) -> None:
    """Fail at the start, in one line, on a value this trainable cannot use."""
    check_trial_config(config, SOURCE, workers)
    choices = {"optimizer": OPTIMIZERS, "precision": PRECISIONS}
    for key, allowed in choices.items():
        if key in config and config[key] not in allowed:
            raise ConfigError(SOURCE, key, f"unknown value {config[key]!r}",
                              f"one of {', '.join(allowed)}")


def train(config: dict[str, Any]) -> None:
    """The trainable: `trainable: trainables.images:train`."""
    check_config(config, dist.size())
    cfg = {**DEFAULTS, **config}
    schedule = BatchSchedule.from_config(config, workers=dist.size(),
                                         default_batch=DEFAULT_BATCH,
                                         default_epochs=cfg["epochs"])
    data = _on_device(cfg)
    if schedule.max > len(data[0]):
        raise ConfigError(SOURCE, "batch_schedule.max" if schedule.max > schedule.start else
                          "batch_size", f"global batch {schedule.max} is more than the "
                          f"{len(data[0])} training images", "lower it or raise train_size")
    torch.manual_seed(cfg["seed"])
    classes = data[1].shape[1] if cfg["multilabel"] else cfg["classes"]
    model = _to_device(build_model(data[0].shape[1], classes, cfg["width"]), cfg)
    optimizer = make_optimizer(cfg["optimizer"], model.parameters(), cfg["lr"], cfg["momentum"],
                               cfg["weight_decay"], cfg["nesterov"])
    start, schedule = _restore(model, optimizer, schedule)
    model, optimizer = dist.prepare(model, optimizer)
    noise = NoiseScale.attach(model) if schedule.grow == "noise" else None
    if schedule.grow == "noise" and noise is None:
        raise ConfigError(SOURCE, "batch_schedule.grow", f"noise is measured on DDP's gradient "
                          f"buckets, not under {dist.backend()}", "use distributed.backend: ddp")
    for epoch in range(start, cfg["epochs"]):
        began = time.perf_counter()
        train_loss, lr = _train_epoch(model, optimizer, data[:2], cfg, schedule, epoch)
        train_s = time.perf_counter() - began  # after the epoch's one host sync
        metrics = evaluate(model, data[2], data[3], cfg["multilabel"], cfg["precision"])
        batch = schedule.global_batch(epoch)
        if noise is not None:  # the same value on every rank: they grow together
            measured = noise.measure(batch)
            metrics["noise_scale"] = math.nan if measured is None else measured
            if measured is not None and measured > batch:
                schedule = schedule.grown(epoch + 1)
        state = {"model": dist.unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
                 "epoch": epoch, "noise_growths": list(schedule.noise_growths)}
        hpo.report({**metrics, "train_loss": train_loss, "epoch": epoch, "lr": lr,
                    "global_batch": batch, "train_s": train_s},
                   checkpoint=state)  # written only when checkpoint.frequency says it is due


def _on_device(cfg: dict[str, Any]) -> Arrays:
    """The data on this rank's device, once per trial: batches are indexed there."""
    arrays = load_data(cfg["data"], cfg["classes"], cfg["channels"], cfg["image_size"],
                       cfg["train_size"], cfg["val_size"], cfg["noise"], cfg["multilabel"])
    x_train, y_train, x_val, y_val = (part.to(dist.device()) for part in arrays)
    if cfg["channels_last"]:
        x_train, x_val = (x.contiguous(memory_format=torch.channels_last)
                          for x in (x_train, x_val))
    return x_train, y_train, x_val, y_val


def _to_device(model: nn.Module, cfg: dict[str, Any]) -> nn.Module:
    model = model.to(dist.device())
    return model.to(memory_format=torch.channels_last) if cfg["channels_last"] else model


def _autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _restore(model: nn.Module, optimizer: torch.optim.Optimizer,
             schedule: BatchSchedule) -> tuple[int, BatchSchedule]:
    """The epoch to start at, and the schedule with the growths the noise scale asked for."""
    state = hpo.get_checkpoint()
    if state is None:
        return 0, schedule
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    grown = tuple(state.get("noise_growths", ()))
    return int(state["epoch"]) + 1, dataclasses.replace(schedule, noise_growths=grown)


def _train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer,
                 data: tuple[torch.Tensor, torch.Tensor], cfg: dict[str, Any],
                 schedule: BatchSchedule, epoch: int) -> tuple[float, float]:
    """One epoch; returns its mean training loss (over all ranks) and its last LR. The loss
    is summed on the device: the host waits for the device once, at the end."""
    x, y = data
    batch, items = schedule.global_batch(epoch), len(x)
    key = "batch_size" if batch == schedule.start else "batch_schedule"
    loss_fn, lr = _loss(cfg["multilabel"]), cfg["lr"]
    total = torch.zeros((), device=x.device)
    model.train()
    for step, rows in enumerate(dist.batches(items, epoch, batch, cfg["seed"], x.device, key)):
        lr = schedule.lr(cfg["lr"], epoch, step, items)
        set_lr(optimizer, lr)
        with _autocast(cfg["precision"], x.device):
            loss = loss_fn(model(x[rows]), y[rows])
        optimizer.zero_grad()  # None grads (torch >= 2); Horovod takes no set_to_none
        loss.backward()
        optimizer.step()
        total += loss.detach()
    return dist.allreduce_mean(total / schedule.steps(epoch, items)), lr


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, multilabel: bool,
             precision: str = "fp32") -> dict[str, float]:
    """Loss and F1 on the validation set, each rank scoring its shard on its device, counts
    and losses summed over ranks in one allreduce."""
    model.eval()
    classes = model(x[:1]).shape[1]
    sums = torch.zeros(3 * classes + 2, dtype=torch.float64, device=x.device)
    for rows in torch.arange(dist.rank(), len(x), dist.size(), device=x.device).split(EVAL_CHUNK):
        with _autocast(precision, x.device):
            logits = model(x[rows]).float()
        truth = y[rows]
        predicted = (logits > 0).float() if multilabel else nn.functional.one_hot(
            logits.argmax(1), classes).float()
        actual = truth if multilabel else nn.functional.one_hot(truth, classes).float()
        counts = torch.stack([(predicted * actual).sum(0), (predicted * (1 - actual)).sum(0),
                              ((1 - predicted) * actual).sum(0)])
        sums[:-2] += counts.flatten().double()
        sums[-2] += _loss(multilabel)(logits, truth).double() * len(rows)
        sums[-1] += len(rows)  # a scalar kernel argument: no copy from the host
    totals = dist.allreduce_sum(sums).cpu()  # the one host sync of the evaluation
    tp, fp, fn = totals[:-2].view(3, classes)
    per_class = 2 * tp / (2 * tp + fp + fn).clamp(min=1)
    micro = 2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()).clamp(min=1)
    metrics = {"val_loss": float(totals[-2] / totals[-1]), "val_f1_micro": float(micro),
               "val_f1_macro": float(per_class.mean())}
    if not multilabel:  # single label: micro F1 is the accuracy
        metrics["val_accuracy"] = metrics["val_f1_micro"]
    return metrics
