"""What runs on each rank: the backend initialised, hpo.report wired to the trial, the trainable."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from hpo import dist, session
from hpo.distributed.channel import Files, pack_folder, unpack_folder


@dataclass
class ChannelLink:
    """hpo.report / hpo.get_checkpoint on a rank (see hpo.session.RankLink)."""

    main: bool
    channel: Any  # ReportChannel actor handle
    checkpoint: Files | None

    def send(self, metrics: dict[str, Any], checkpoint: Path | None) -> None:
        files = pack_folder(checkpoint) if checkpoint is not None else None
        ray.get(self.channel.put.remote((metrics, files)))

    def restored(self) -> Path | None:
        if self.checkpoint is None:
            return None
        return unpack_folder(self.checkpoint, Path(tempfile.mkdtemp(prefix="hpo-restore-")))


def run_rank(func: Any, config: dict[str, Any], backend: dist.Backend, channel: Any,
             checkpoint: Files | ray.ObjectRef | None, checkpoint_every: int,
             threads: int) -> None:
    """Entry point executed on every rank of a trial."""
    import torch

    torch.set_num_threads(threads)  # one rank per bundle: use its CPUs, not the node's
    dist.init(backend)
    if isinstance(checkpoint, ray.ObjectRef):  # nested in the argument list: not resolved
        checkpoint = ray.get(checkpoint)
    link = ChannelLink(dist.is_main(), channel, checkpoint)
    try:
        with session.trial_session(checkpoint_every, link):
            func(config)
    finally:
        dist.shutdown()
