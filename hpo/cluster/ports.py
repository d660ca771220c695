"""A per-job block of TCP ports for every port a Ray node opens, checked free before use.

Shared nodes run several jobs at once; Ray's fixed defaults (6379, 10001, 8265, workers from
10002) would collide. Each job starts at the block its job id points to and takes the first
block whose ports are all free on the node. Blocks stay below Linux's ephemeral range
(32768+), where outgoing connections would grab ports at random.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

FIRST_PORT, END_PORT, BLOCK = 20000, 32000, 500
WORKER_OFFSET = 100  # worker ports: base+100 .. base+BLOCK-1 (400 worker processes)
BLOCKS = (END_PORT - FIRST_PORT) // BLOCK


@dataclass(frozen=True)
class RayPorts:
    """All ports of one Ray node, from its block's base port."""

    base: int

    @property
    def gcs(self) -> int:
        return self.base

    @property
    def named(self) -> dict[str, int]:
        """`ray start` option -> port (head-only ones included; workers skip them)."""
        b = self.base
        # b + 1 stays reserved for a Ray Client server (off: it needs ray[client])
        return {"--port": b, "--dashboard-port": b + 2,
                "--node-manager-port": b + 3, "--object-manager-port": b + 4,
                "--runtime-env-agent-port": b + 5, "--dashboard-agent-grpc-port": b + 6,
                "--dashboard-agent-listen-port": b + 7, "--metrics-export-port": b + 8,
                "--min-worker-port": b + WORKER_OFFSET,
                "--max-worker-port": b + BLOCK - 1}

    def all_ports(self) -> range:
        return range(self.base, self.base + BLOCK)


def first_block(job_id: str) -> int:
    """The block a job id points to (array jobs '123_4' use the number before '_')."""
    digits = "".join(c for c in job_id.split("_")[0] if c.isdigit())
    return int(digits or 0) % BLOCKS


def port_is_free(port: int) -> bool:
    """True when nothing on this node listens on (or holds) the TCP port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def pick_ports(job_id: str, is_free: Callable[[int], bool] = port_is_free) -> RayPorts:
    """The job's block if all its ports are free here, else the next free one (wrapping).

    Example:
        >>> pick_ports("4021").base  # on a node where nothing else runs
        26500
    """
    start = first_block(job_id)
    for step in range(BLOCKS):
        ports = RayPorts(FIRST_PORT + (start + step) % BLOCKS * BLOCK)
        if all(is_free(p) for p in ports.all_ports()):
            return ports
    raise OSError(f"no free block of {BLOCK} TCP ports between {FIRST_PORT} and {END_PORT}")
