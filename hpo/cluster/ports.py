"""A per-job block of TCP ports for every port a Ray node opens, checked free before use.

Shared nodes run several jobs at once; Ray's fixed defaults (6379, 10001, 8265, workers from
10002) would collide. Each job starts at the block its job id points to and takes the first
block whose ports are all free on the node. Blocks stay below Linux's ephemeral range
(32768+), where outgoing connections would grab ports at random.

Two jobs starting on one node at once could both find a block free before either's Ray binds
it (a job whose own block is busy moves on to the next job's). A node's start therefore
claims its block: it binds the block's spare port (CLAIM_OFFSET) for as long as it runs, and
a block whose spare port is bound is busy to every other job's check.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

FIRST_PORT, END_PORT, BLOCK = 20000, 32000, 500
WORKER_OFFSET = 100  # worker ports: base+100 .. base+BLOCK-1 (400 worker processes)
CLAIM_OFFSET = 1  # a Ray Client server's port, which Ray leaves unbound here (RayPorts.named)
BLOCKS = (END_PORT - FIRST_PORT) // BLOCK

# The claims of this process's blocks: the kernel frees them when the process ends.
_claims: list[socket.socket] = []


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
        # b + CLAIM_OFFSET: a Ray Client server's (off: it needs ray[client]); the claim's
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
    """True when nothing on this node listens on or holds the TCP port. A port that only an
    ended connection still holds (TIME_WAIT, for a minute after a job's end) is free: Ray's
    servers bind with SO_REUSEADDR, as this check does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def _claim(port: int) -> socket.socket | None:
    """The port bound, without SO_REUSEADDR so that every other bind of it fails (None: it
    is taken)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("", port))
    except OSError:
        sock.close()
        return None
    return sock


def pick_ports(job_id: str, is_free: Callable[[int], bool] = port_is_free,
               claim: bool = False) -> RayPorts:
    """The job's block if all its ports are free here, else the next free one (wrapping);
    with `claim`, that block is held for this process's life (see the module's doc).

    Example:
        >>> pick_ports("4021").base  # on a node where nothing else runs
        26500
    """
    start = first_block(job_id)
    for step in range(BLOCKS):
        ports = RayPorts(FIRST_PORT + (start + step) % BLOCKS * BLOCK)
        if not all(is_free(p) for p in ports.all_ports()):
            continue
        if not claim:
            return ports
        held = _claim(ports.base + CLAIM_OFFSET)
        if held is not None:  # else another job claimed it since the check
            _claims.append(held)
            return ports
    raise OSError(f"no free block of {BLOCK} TCP ports between {FIRST_PORT} and {END_PORT}")
