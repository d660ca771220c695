"""Built-in demo trainable: a small PyTorch MLP on scikit-learn's digits dataset.

The data (1797 8x8 images, bundled with scikit-learn, no download) is loaded once
per process, split 80/20 (stratified, fixed seed independent of the config) and
standardised with training-set statistics.  Each epoch reports
``val_accuracy``, ``val_loss``, ``train_loss`` and ``epoch`` via ``hpo.report``
together with a checkpoint dict ``{"model", "optimizer", "epoch"}``; a trial
restored from such a checkpoint resumes exactly where it stopped.

Config keys (all optional):
    lr (0.01)            learning rate
    momentum (0.9)       SGD momentum (ignored by Adam)
    batch_size (64)      mini-batch size
    hidden (64)          width of each hidden layer
    depth (1)            number of hidden layers
    weight_decay (0.0)   L2 penalty passed to the optimizer
    epochs (10)          total number of epochs
    seed (0)             seed for weight init and shuffling
    optimizer ("sgd")    "sgd" or "adam"
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import hpo
from hpo import dist

DEFAULTS: dict[str, Any] = {
    "lr": 0.01,
    "momentum": 0.9,
    "batch_size": 64,
    "hidden": 64,
    "depth": 1,
    "weight_decay": 0.0,
    "epochs": 10,
    "seed": 0,
    "optimizer": "sgd",
}
SPLIT_SEED = 1234
N_FEATURES = 64
N_CLASSES = 10


@functools.lru_cache(maxsize=1)
def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return standardised (x_train, y_train, x_val, y_val) tensors, cached per process."""
    x, y = load_digits(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(
        x.astype(np.float32), y, test_size=0.2, stratify=y, random_state=SPLIT_SEED
    )
    mean = x_tr.mean(axis=0)
    std = x_tr.std(axis=0)
    std[std == 0] = 1.0
    return (
        torch.from_numpy((x_tr - mean) / std),
        torch.from_numpy(y_tr).long(),
        torch.from_numpy((x_va - mean) / std),
        torch.from_numpy(y_va).long(),
    )


def build_model(hidden: int, depth: int) -> nn.Module:
    """MLP with ``depth`` ReLU hidden layers of width ``hidden``."""
    layers: list[nn.Module] = []
    width = N_FEATURES
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, N_CLASSES))
    return nn.Sequential(*layers)


def build_optimizer(model: nn.Module, cfg: dict[str, Any]) -> torch.optim.Optimizer:
    """Create the optimizer named by ``cfg["optimizer"]``."""
    name = str(cfg["optimizer"]).lower()
    params, lr, wd = model.parameters(), float(cfg["lr"]), float(cfg["weight_decay"])
    if name == "sgd":
        return torch.optim.SGD(
            params, lr=lr, momentum=float(cfg["momentum"]), weight_decay=wd
        )
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    raise ValueError(
        f"unknown optimizer {cfg['optimizer']!r}; expected 'sgd' or 'adam'"
    )


def apply_hyperparameters(opt: torch.optim.Optimizer, cfg: dict[str, Any]) -> None:
    """Set the config's learning rate, weight decay and momentum on every parameter group.
    A restored optimizer state carries the values of the trial it was saved by: after PBT or
    PB2 copies another trial's checkpoint and changes the config, the trial must train with
    the new values, not the copied ones."""
    for group in opt.param_groups:
        group["lr"] = float(cfg["lr"])
        group["weight_decay"] = float(cfg["weight_decay"])
        if "momentum" in group:
            group["momentum"] = float(cfg["momentum"])


def train_epoch(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    data: tuple[torch.Tensor, torch.Tensor],
    batch_size: int,
    gen: torch.Generator,
) -> float:
    """One pass over the training data; returns the mean training loss."""
    x, y = data
    model.train()
    perm = torch.randperm(len(x), generator=gen).to(x.device)
    total = torch.zeros((), device=x.device)  # summed on the device: one host sync per epoch
    for start in range(0, len(x), batch_size):
        idx = perm[start : start + batch_size]
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach() * len(idx)
    return total.item() / len(x)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Return (accuracy, mean cross-entropy loss) on the given data."""
    model.eval()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    acc = (logits.argmax(dim=1) == y).float().mean().item()
    return acc, loss


def train(config: dict[str, Any]) -> None:
    """Train the digits MLP, reporting metrics and a checkpoint every epoch."""
    cfg = {**DEFAULTS, **(config or {})}
    seed = int(cfg["seed"])
    device = dist.device()  # the data lives there: batches are indexed on the device
    x_tr, y_tr, x_va, y_va = (part.to(device) for part in load_data())
    torch.manual_seed(seed)
    model = build_model(int(cfg["hidden"]), int(cfg["depth"])).to(device)
    opt = build_optimizer(model, cfg)
    start = 0
    state = hpo.get_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        apply_hyperparameters(opt, cfg)  # the config's, not those saved with the state
        start = int(state["epoch"]) + 1
    gen = torch.Generator()
    for epoch in range(start, int(cfg["epochs"])):
        # Shuffling depends only on (seed, epoch), so resuming is exact.
        gen.manual_seed(seed * 100_003 + epoch)
        train_loss = train_epoch(model, opt, (x_tr, y_tr), int(cfg["batch_size"]), gen)
        val_acc, val_loss = evaluate(model, x_va, y_va)
        metrics = {
            "val_accuracy": val_acc,
            "val_loss": val_loss,
            "train_loss": train_loss,
            "epoch": epoch,
        }
        # Deep copy so the reported checkpoint is a snapshot, not live tensors.
        checkpoint = copy.deepcopy(
            {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}
        )
        hpo.report(metrics, checkpoint=checkpoint)
