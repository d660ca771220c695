"""Small data-parallel trainables for the tests, loaded by file path like a user's own."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import hpo
from hpo import dist


def torch_preloaded(config: dict[str, Any]) -> None:
    """Reports whether its worker was forked by hpo's fork server and whether that server had
    torch imported already; then waits (up to 120 s) until the server has torch, so that
    its next fork has it (a server imports what it is told between two forks)."""
    forked = b"fork_server_process" in Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    preloaded = forked and _parent_has_torch()
    deadline = time.monotonic() + 120
    while forked and not _parent_has_torch() and time.monotonic() < deadline:
        time.sleep(0.1)
    hpo.report({"score": 1.0, "forked": forked, "preloaded": preloaded})


def _parent_has_torch() -> bool:
    return "libtorch" in Path(f"/proc/{os.getppid()}/maps").read_text()


def _data(items: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(items, 8, generator=generator)
    y = x @ torch.arange(1.0, 9.0) + 0.1 * torch.randn(items, generator=generator)
    return x, y


def _fresh(config: dict[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    return model, torch.optim.SGD(model.parameters(), lr=config.get("lr", 0.01), momentum=0.9)


def _flat_parameters(model: nn.Module) -> np.ndarray:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()


def initial_weights() -> np.ndarray:
    model, _ = _fresh({})
    return _flat_parameters(model)


def first_step_weights(batch_size: int) -> np.ndarray:
    """All parameters after one SGD step on the first global batch (on this rank's share)."""
    model, optimizer = _fresh({})
    model, optimizer = dist.prepare(model, optimizer)
    x, y = _data()
    rows = dist.shard(len(x), epoch=0)[:dist.local_batch_size(batch_size)]
    loss = nn.functional.mse_loss(model(x[rows]).squeeze(1), y[rows])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return _flat_parameters(dist.unwrap(model))


def one_step(config: dict[str, Any]) -> None:
    """One step; rank 0 saves the parameters to `out`, every rank names its host in
    `marker_dir` (if given) and writes a line to stdout, to stderr and to file descriptor 2
    (as native libraries such as NCCL do)."""
    print(f"rank {dist.rank()} of {dist.size()}: stdout", flush=True)
    print(f"rank {dist.rank()} of {dist.size()}: stderr", file=sys.stderr)
    os.write(2, f"rank {dist.rank()} of {dist.size()}: fd 2\n".encode())
    weights = first_step_weights(config["batch_size"])
    if dist.is_main():
        np.save(config["out"], weights)
    if config.get("marker_dir"):
        Path(config["marker_dir"], f"rank{dist.rank()}-{socket.gethostname()}").touch()
    hpo.report({"loss": float(np.abs(weights).sum()), "ranks": dist.size(),
                "backend": dist.backend()})


def regression(config: dict[str, Any]) -> None:
    """Epochs of sharded SGD with a checkpoint each epoch. `kill_rank` SIGKILLs that rank once
    at `kill_epoch` (a marker file under `marker_dir` lets the retry live); `hang_rank` sleeps
    at `hang_epoch`."""
    model, optimizer = _fresh(config)
    state = hpo.get_checkpoint()
    start = 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    model, optimizer = dist.prepare(model, optimizer)
    x, y = _data()
    local = dist.local_batch_size(config.get("batch_size", 32))
    for epoch in range(start, config.get("epochs", 4)):
        _maybe_die(config, epoch)
        rows = dist.shard(len(x), epoch)
        for begin in range(0, len(rows) - local + 1, local):
            batch = rows[begin:begin + local]
            loss = nn.functional.mse_loss(model(x[batch]).squeeze(1), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            val = dist.allreduce_mean(nn.functional.mse_loss(model(x).squeeze(1), y).item())
        state = {"model": dist.unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
                 "epoch": epoch}
        hpo.report({"loss": val, "epoch": epoch, "ranks": dist.size(), "start": start,
                    "pid": os.getpid()}, checkpoint=state)


def _maybe_die(config: dict[str, Any], epoch: int) -> None:
    if config.get("hang_rank") == dist.rank() and config.get("hang_epoch") == epoch:
        time.sleep(3600)
    if config.get("kill_rank") != dist.rank() or config.get("kill_epoch") != epoch:
        return
    marker = Path(config["marker_dir"]) / f"killed-{dist.rank()}"
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)


def paced(config: dict[str, Any]) -> None:
    """`steps` steps of `sleep` seconds of work each, shared evenly by the ranks (as a fixed
    global batch is), a checkpoint each step; `start` is the step this process began at."""
    state = hpo.get_checkpoint()
    start = state["step"] + 1 if state else 1
    for step in range(start, config["steps"] + 1):
        time.sleep(config["sleep"] / dist.size())
        hpo.report({"score": float(step), "start": start}, checkpoint={"step": step})


def tensor_loss(config: dict[str, Any]) -> None:
    """Reports its loss as the tensor itself, not loss.item()."""
    hpo.report({"loss": torch.tensor(0.5)})
