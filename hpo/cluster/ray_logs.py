"""Ray's own logs of a node's start (gcs_server.out, raylet.out, ...), shown in the node's log
where the start fails: they are in Ray's session folder inside the node's private folder, which
is removed when the node ends, so the path Ray's own message names is gone by then."""

from __future__ import annotations

import contextlib
from pathlib import Path

from hpo.cluster.render import ray_temp_dir

RAY_START_LOGS = ("gcs_server.out", "gcs_server.err", "raylet.out", "raylet.err")
RAY_LOG_MARK = "  ray | "  # each line shown; hpo.cluster.bootstrap's one-line reason skips them


def print_ray_logs(job_id: str, lines: int = 40) -> None:
    """The ends of Ray's own logs of this node's latest session, into this node's log."""
    folder = Path(ray_temp_dir(job_id), "session_latest", "logs")
    for name in RAY_START_LOGS:
        with contextlib.suppress(OSError):
            shown = [ln for ln in (folder / name).read_text(errors="replace").splitlines()
                     if ln.strip()][-lines:]
            if shown:
                print("\n".join(RAY_LOG_MARK + line for line in
                                [f"the end of Ray's {name} on this node:", *shown]), flush=True)
