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
    """A one-slot mailbox between rank 0 (put) and the trial process (take, ack). It serves
    every trial of a warm rank group (hpo.trial.ranks.pool): `reset` opens it for the next one."""

    def __init__(self) -> None:
        self._reports: asyncio.Queue[tuple[Report, asyncio.Event] | None] = asyncio.Queue()
        self._taken: asyncio.Event | None = None
        self._stopped = False
        self._acked = 0  # reports of this trial handed to Tune
        self._decided = asyncio.Condition()
        # (rank, whether its error is its own, the error in one line) of each rank whose
        # trainable raised, in the order they did (hpo.trial.ranks.blame)
        self._failed: list[tuple[int, bool, str]] = []

    async def put(self, report: Report) -> bool:
        """Called by rank 0; returns once the trial has handed the report to Tune: True to go
        on, False when Tune stopped the trial meanwhile."""
        if self._stopped:  # nobody takes it any more
            return False
        done = asyncio.Event()
        await self._reports.put((report, done))
        await done.wait()
        return not self._stopped

    async def take(self) -> Report | None:
        """The next report; None for a take left over from a trial that has ended."""
        item = await self._reports.get()
        if item is None:
            return None
        report, self._taken = item
        return report

    async def ack(self) -> None:
        if self._taken is not None:
            self._taken.set()
            self._taken = None
            self._acked += 1
        async with self._decided:
            self._decided.notify_all()

    async def decision(self, report: int) -> bool:
        """Called by the other ranks at their `report`th report (1-based, this run): returns
        once rank 0's same report went to Tune, True to go on, False when Tune stopped."""
        async with self._decided:
            await self._decided.wait_for(lambda: self._acked >= report or self._stopped)
        return not self._stopped

    async def stop(self) -> None:
        """Tune stopped the trial: rank 0's waiting put returns False, and so does any later."""
        self._stopped = True
        await self.ack()
        while not self._reports.empty():  # a report not taken yet: its rank 0 waits too
            item = self._reports.get_nowait()
            if item is not None:
                item[1].set()

    async def failed(self, rank: int, own: bool, error: str) -> bool:
        """A rank's trainable raised `error` (in one line), its own or only a peer's loss;
        called before the rank leaves its group, whose end fails the peers' collectives, so
        the first rank noted with an error of its own began the failure. Returns whether the
        trial was stopped (its rank 0 left: no failure then)."""
        self._failed.append((rank, own, error))
        return self._stopped

    async def failures(self) -> list[tuple[int, bool, str]]:
        """What `failed` noted, in the order it was."""
        return list(self._failed)

    async def reset(self) -> None:
        """Open for a new trial; a take still waiting from the last one gets None."""
        self._reports.put_nowait(None)
        self._reports = asyncio.Queue()
        self._taken, self._stopped, self._acked, self._failed = None, False, 0, []
