"""One meaning per config: the built-in trainable gives the same losses on 1, 2 and 4 ranks
(real Horovod and real torch DDP on Gloo, through real `hpo run`s) as in one process.

The config grows its batch mid-run (32, then 64 with the LR moved by the sqrt rule and
ramped), so the rank-count-free LR, the ramp and the per-step sample split are all under test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from calls import trial_rows

import hpo
from hpo.trial.session import local_trial
from trainables import images

pytestmark = pytest.mark.slow
CONFIG = {"epochs": 2, "train_size": 256, "val_size": 64, "image_size": 8, "width": 4,
          "classes": 4, "noise": 0.5, "lr": 0.1, "seed": 3,
          "batch_schedule": {"start": 32, "max": 64, "double_every": 1, "lr_rule": "sqrt",
                             "ramp_steps": 2}}
LOSSES = ("train_loss", "val_loss")
RTOL = 1e-3


def _losses(reports: list[dict[str, Any]]) -> np.ndarray:
    return np.array([[report[key] for key in LOSSES] for report in reports])


def _one_process(config: dict[str, Any]) -> np.ndarray:
    with local_trial() as reports:
        images.train(config)
    return _losses(reports)


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    """The losses of one plain process, and proof that RTOL tells a changed LR apart."""
    losses = _one_process(CONFIG)
    assert losses.shape == (2, 2) and not np.allclose(losses[0], losses[1], rtol=RTOL)
    doubled = _one_process({**CONFIG, "lr": 2 * CONFIG["lr"]})  # as 2 ranks x linear did
    assert not np.allclose(doubled, losses, rtol=RTOL)
    return losses


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_images_gives_the_same_losses_on_1_2_and_4_ranks(
        tmp_path: Path, backend: str, workers: int, expected: np.ndarray) -> None:
    spec = {"name": f"{backend}-{workers}", "trainable": "trainables.images:train",
            "metric": "val_loss", "mode": "min", "storage": str(tmp_path),
            "constants": CONFIG, "checkpoint": {"frequency": 0},
            "distributed": {"backend": backend, "workers": workers,
                            "cpus_per_worker": 2 / workers}}
    result = hpo.run(spec, num_cpus=2)
    ((rows,),) = [trial_rows(result.path).values()]
    assert [row["global_batch"] for row in rows] == [32, 64]
    np.testing.assert_allclose(_losses(rows), expected, rtol=RTOL,
                               err_msg=f"{backend} on {workers} ranks")


def test_adam_on_two_horovod_ranks_gives_the_one_process_losses(tmp_path: Path) -> None:
    """Adam keeps a step count: Horovod's broadcast_optimizer_state would start it at one (a
    zero-gradient step on a fresh optimizer), which DDP and one process do not."""
    config = {**CONFIG, "optimizer": "adam", "lr": 0.01}
    spec = {"name": "adam", "trainable": "trainables.images:train", "metric": "val_loss",
            "mode": "min", "storage": str(tmp_path), "constants": config,
            "checkpoint": {"frequency": 0},
            "distributed": {"backend": "horovod", "workers": 2, "cpus_per_worker": 1}}
    ((rows,),) = [trial_rows(hpo.run(spec, num_cpus=2).path).values()]
    np.testing.assert_allclose(_losses(rows), _one_process(config), rtol=RTOL)
