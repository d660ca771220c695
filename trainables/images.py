"""Built-in data-parallel trainable: a small CNN image classifier, single- or multi-label.

Runs the same on one process, on Horovod ranks and on DDP ranks (see `distributed:` in
search_spaces/images-horovod-asha.yaml). Data is either a NumPy file (`data: path.npz` with
x_train, y_train, x_val, y_val; images N x C x H x W, labels as class ids or, for multi-label
data such as BigEarthNet patches, as N x classes 0/1 arrays) or a synthetic generator that needs
no download (`data: synthetic`): every class has its own texture (a grating of fixed frequency,
angle and colour), an image is the sum of its labels' textures at random phases plus noise.

Each epoch reports val_loss, val_f1_micro, val_f1_macro (and val_accuracy for single-label
data), the global batch and the learning rate, with a checkpoint of model, optimizer and epoch;
a restored trial continues exactly where it stopped.

Config keys (all optional): data ("synthetic"), multilabel (False), classes (10), channels (3),
image_size (16), train_size (4096), val_size (1024), noise (1.0), width (16), epochs (10),
seed (0), lr (0.05, per rank before scaling), lr_scaling ("linear" | "sqrt" | "none"),
warmup_epochs (0), optimizer ("sgd" | "adam" | "adamw" | "lars" | "lamb"), momentum (0.9),
nesterov (False), weight_decay (0), batch_size (256, global), big_batch_size (0: fixed),
big_batch_from_epoch (0), big_batch_lr_scaling ("none": the bigger batch replaces an LR decay;
"sqrt" | "linear": the LR grows with the batch), big_batch_warmup_epochs (1: that growth's ramp).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from torch import nn

import hpo
from hpo import dist
from hpo.large_batch import BatchSchedule, make_optimizer, scaled_lr, set_lr, warmup_lr

DEFAULTS: dict[str, Any] = {
    "data": "synthetic", "multilabel": False, "classes": 10, "channels": 3, "image_size": 16,
    "train_size": 4096, "val_size": 1024, "noise": 1.0, "width": 16, "epochs": 10, "seed": 0,
    "lr": 0.05, "lr_scaling": "linear", "warmup_epochs": 0, "optimizer": "sgd",
    "momentum": 0.9, "nesterov": False, "weight_decay": 0.0, "batch_size": 256,
    "big_batch_size": 0, "big_batch_from_epoch": 0, "big_batch_lr_scaling": "none",
}
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


def train(config: dict[str, Any]) -> None:
    """The trainable: `trainable: trainables.images:train`."""
    cfg = {**DEFAULTS, **config}
    x_train, y_train, x_val, y_val = load_data(
        cfg["data"], cfg["classes"], cfg["channels"], cfg["image_size"], cfg["train_size"],
        cfg["val_size"], cfg["noise"], cfg["multilabel"])
    torch.manual_seed(cfg["seed"])
    classes = y_train.shape[1] if cfg["multilabel"] else cfg["classes"]
    model = build_model(x_train.shape[1], classes, cfg["width"]).to(dist.device())
    target_lr = scaled_lr(cfg["lr"], dist.size(), cfg["lr_scaling"])
    optimizer = make_optimizer(cfg["optimizer"], model.parameters(), target_lr, cfg["momentum"],
                               cfg["weight_decay"], cfg["nesterov"])
    start = _restore(model, optimizer)
    model, optimizer = dist.prepare(model, optimizer)
    schedule = BatchSchedule.from_config(cfg)
    for epoch in range(start, cfg["epochs"]):
        lr = _train_epoch(model, optimizer, x_train, y_train, cfg, schedule, epoch, target_lr)
        metrics = evaluate(model, x_val, y_val, cfg["multilabel"])
        state = {"model": dist.unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
                 "epoch": epoch}
        hpo.report({**metrics, "epoch": epoch, "global_batch": schedule.global_batch(epoch),
                    "lr": lr}, checkpoint=state)


def _restore(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    state = hpo.get_checkpoint()
    if state is None:
        return 0
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["epoch"]) + 1


def _train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                 y: torch.Tensor, cfg: dict[str, Any], schedule: BatchSchedule, epoch: int,
                 target_lr: float) -> float:
    rows = dist.shard(len(x), epoch, cfg["seed"])
    local = min(dist.local_batch_size(schedule.global_batch(epoch)), len(rows))
    steps = len(rows) // local  # the same on every rank: no rank waits in an allreduce alone
    loss_fn, device, lr = _loss(cfg["multilabel"]), dist.device(), target_lr
    model.train()
    for step in range(steps):
        progress = epoch + step / steps
        lr = warmup_lr(schedule.lr(target_lr, progress), cfg["lr"], progress,
                       cfg["warmup_epochs"])
        set_lr(optimizer, lr)
        batch = rows[step * local:(step + 1) * local]
        loss = loss_fn(model(x[batch].to(device)), y[batch].to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return lr


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
             multilabel: bool) -> dict[str, float]:
    """Loss and F1 on the validation set, each rank scoring its shard, counts summed."""
    model.eval()
    rows = torch.arange(dist.rank(), len(x), dist.size())
    logits = model(x[rows].to(dist.device())).cpu()
    truth = y[rows]
    loss_sum = _loss(multilabel)(logits, truth).item() * len(rows)
    classes = logits.shape[1]
    predicted = (logits > 0).float() if multilabel else nn.functional.one_hot(
        logits.argmax(1), classes).float()
    actual = truth if multilabel else nn.functional.one_hot(truth, classes).float()
    counts = torch.stack([(predicted * actual).sum(0), (predicted * (1 - actual)).sum(0),
                          ((1 - predicted) * actual).sum(0)]).double()
    totals = dist.allreduce_sum(torch.cat([counts.flatten(),
                                           torch.tensor([loss_sum, len(rows)]).double()]))
    tp, fp, fn = totals[:-2].view(3, classes)
    per_class = 2 * tp / (2 * tp + fp + fn).clamp(min=1)
    micro = 2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()).clamp(min=1)
    metrics = {"val_loss": float(totals[-2] / totals[-1]), "val_f1_micro": float(micro),
               "val_f1_macro": float(per_class.mean())}
    if not multilabel:  # single label: micro F1 is the accuracy
        metrics["val_accuracy"] = metrics["val_f1_micro"]
    return metrics
