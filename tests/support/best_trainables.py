"""Trainables for tests/reporting/test_best_checkpoint.py, loaded by file path
(`tests/support/best_trainables.py:NAME`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray import tune

import hpo


def peaks(config: dict[str, Any]) -> None:
    """`steps` reports whose score peaks at step `peak` and falls after it: `score` (max) is
    height - (step - peak)**2, `loss` (min) its negative. Each report carries the checkpoint
    {"step": step} (a torch tensor beside it with `torch: true`, saved as hpo_state.pt);
    resumable from its checkpoint. `checkpoints: false` reports none."""
    if config.get("torch"):
        import torch  # noqa: F401  (hpo saves the state with torch once it is loaded)
    state = hpo.get_checkpoint()
    start = int(state["step"]) + 1 if state else 1
    for step in range(start, config["steps"] + 1):
        score = config["height"] - (step - config["peak"]) ** 2
        checkpoint = _state(step, bool(config.get("torch"))) if config.get(
            "checkpoints", True) else None
        hpo.report({"score": score, "loss": -score, "resumed_at": start}, checkpoint=checkpoint)


def _state(step: int, with_torch: bool) -> dict[str, Any]:
    if not with_torch:
        return {"step": step}
    import torch

    return {"step": step, "weights": torch.full((2,), float(step))}



class Peaks(tune.Trainable):
    """`peaks` as a Ray Tune class trainable: Tune saves step.txt every checkpoint.frequency
    steps; the run ends by `stop: {training_iteration: N}`."""

    def setup(self, config: dict[str, Any]) -> None:
        self.at = 0

    def step(self) -> dict[str, Any]:
        self.at += 1
        return {"score": self.config["height"] - (self.at - self.config["peak"]) ** 2}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "step.txt").write_text(str(self.at))

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        self.at = int(Path(checkpoint_dir, "step.txt").read_text())
