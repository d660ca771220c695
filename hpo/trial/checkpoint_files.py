"""A checkpoint as hpo stores it, in one place: written by the trial (hpo.trial.session),
read back by the trial and by `hpo.load_checkpoint` (load).

A folder holds the number of reports so far (`hpo_iteration`) and the checkpoint the
trainable handed over: a dict of state (`hpo_state.pt`, saved with torch.save where torch is
loaded, else `hpo_state.pkl` with pickle) or a copy of a directory (`hpo_dir/`). A folder of
plain Ray Tune code has none of these: it is the checkpoint itself.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpo.errors import ExperimentError

STATE_PT, STATE_PKL, DIRECTORY, ITERATION = (
    "hpo_state.pt", "hpo_state.pkl", "hpo_dir", "hpo_iteration")


def write(folder: Path, checkpoint: Any, reports: int) -> None:
    """Store `checkpoint` (a dict of state, or a directory's path) in `folder`, with the
    number of reports so far."""
    (folder / ITERATION).write_text(str(reports))
    if isinstance(checkpoint, (str, os.PathLike)):
        shutil.copytree(checkpoint, folder / DIRECTORY)
    elif "torch" in sys.modules:
        sys.modules["torch"].save(checkpoint, folder / STATE_PT)
    else:
        with open(folder / STATE_PKL, "wb") as file:
            pickle.dump(checkpoint, file)


def holds_state(folder: Path) -> bool:
    """Whether `folder` holds a dict of state (not a directory's copy, nor plain Tune's)."""
    return not (folder / DIRECTORY).exists() and any(
        (folder / name).is_file() for name in (STATE_PT, STATE_PKL))


def as_path(folder: Path) -> str:
    """A folder that holds no state, as the path the trainable gets back: its directory's
    copy, or the folder itself (plain Ray Tune code's)."""
    return str(folder / DIRECTORY) if (folder / DIRECTORY).is_dir() else str(folder)


def load(folder: str | Path) -> Any:
    """A checkpoint folder's content as the trainable reported it (`hpo.load_checkpoint`):
    the dict (loaded with torch or pickle, as it was saved; tensors saved on a GPU land on
    this process's GPU, or the CPU without one), or, for a directory checkpoint, that
    directory's path (a Ray Tune class trainable's or plain Tune code's: the folder's own)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ExperimentError(f"{folder}: no such checkpoint folder. Hint: pass "
                              "hpo.load(DIR).best_checkpoint, or a trial's checkpoint_* folder")
    if not holds_state(folder):
        return as_path(folder)
    return load_state(folder)


def load_state(folder: Path, device: str | None = None) -> Any:
    """The dict of state in `folder`, its tensors saved on a GPU onto `device` (by default
    this rank's, hpo.trial.dist.device: asked only for a torch checkpoint, since asking
    imports torch, and a trial that has torch loaded saves its next checkpoints with it)."""
    if (folder / STATE_PT).exists():
        import torch

        from hpo.trial import dist

        # Saved GPU tensors name the saving rank's device (cuda:3); without a map they would
        # all land on cuda:0 of a Horovod node, or fail where no GPU is: onto this rank's own.
        onto = _onto(device if device is not None else str(dist.device()))
        return torch.load(folder / STATE_PT, map_location=onto, weights_only=False)
    with open(folder / STATE_PKL, "rb") as file:
        return pickle.load(file)


def restore_location(saved: str, device: str) -> str:
    """Where a storage saved at `saved` (torch's location tag) is restored: CPU tensors stay
    on the CPU (a saved RNG state must), any other device's go to this rank's `device`."""
    return saved if saved == "cpu" else device


def _onto(device: str) -> Callable[[Any, str], Any]:
    from torch.serialization import default_restore_location

    def restore(storage: Any, saved: str) -> Any:
        return default_restore_location(storage, restore_location(saved, device))

    return restore
