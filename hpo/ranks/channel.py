"""Rank 0 -> trial: one report at a time, with its checkpoint files, acknowledged by the trial.

Rank 0 waits for the acknowledgement, so a trial that Tune stops or pauses never runs ahead of
the scheduler's decision by more than the step in flight.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ray

Files = dict[str, bytes]  # relative path -> content: a checkpoint folder in transit
Report = tuple[dict[str, Any], Files | None]


def pack_folder(folder: Path) -> Files:
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def unpack_folder(files: Files, folder: Path) -> Path:
    for name, content in files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return folder


@ray.remote(num_cpus=0)
class ReportChannel:
    """A one-slot mailbox between rank 0 (put) and the trial process (take, ack)."""

    def __init__(self) -> None:
        self._reports: asyncio.Queue[tuple[Report, asyncio.Event]] = asyncio.Queue()
        self._taken: asyncio.Event | None = None

    async def put(self, report: Report) -> None:
        """Called by rank 0; returns once the trial has handed the report to Tune."""
        done = asyncio.Event()
        await self._reports.put((report, done))
        await done.wait()

    async def take(self) -> Report:
        report, self._taken = await self._reports.get()
        return report

    async def ack(self) -> None:
        if self._taken is not None:
            self._taken.set()
