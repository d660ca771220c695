"""Ray's own logs of a node's start (gcs_server.out, raylet.out, ...), shown in the node's log
where the start fails: they are in Ray's session folder inside the node's private folder, which
is removed when the node ends, so the path Ray's own message names is gone by then."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from hpo.cluster.render import ray_temp_dir

RAY_START_LOGS = ("gcs_server.out", "gcs_server.err", "raylet.out", "raylet.err")
RAY_LOG_MARK = "  ray | "  # each line shown; hpo.cluster.bootstrap's one-line reason skips them
TAIL_BYTES = 64 << 10  # a raylet.out may be hundreds of MB after a long run


def latest(folder: Path, name: str) -> Path | None:
    """The newest of a log's files: Ray names a later start's on the same session `raylet.1.out`
    and so on (a worker node's retried start keeps the head's session folder)."""
    stem, suffix = name.rsplit(".", 1)
    found = [p for p in folder.glob(f"{stem}*.{suffix}")
             if re.fullmatch(rf"{re.escape(stem)}(\.\d+)?\.{suffix}", p.name)]
    return max(found, key=lambda p: p.stat().st_mtime_ns, default=None)


def print_ray_logs(job_id: str, lines: int = 40) -> None:
    """The ends of Ray's own logs of this node's latest session, into this node's log."""
    folder = Path(ray_temp_dir(job_id), "session_latest", "logs")
    for name in RAY_START_LOGS:
        with contextlib.suppress(OSError):
            path = latest(folder, name)
            if path is None:
                continue
            with open(path, "rb") as log:
                log.seek(max(0, path.stat().st_size - TAIL_BYTES))
                text = log.read().decode(errors="replace")
            shown = [ln for ln in text.splitlines() if ln.strip()][-lines:]
            if shown:
                print("\n".join(RAY_LOG_MARK + line for line in
                                [f"the end of Ray's {path.name} on this node:", *shown]),
                      flush=True)
