"""Where hpo's private temp folders go: an embedded run's (hpo.cluster.run_dir) and the warm
local Ray's (hpo.cluster.warm), each holding Ray's temp dir and its Unix sockets."""

from __future__ import annotations

import os
from pathlib import Path

# The longest $TMPDIR the folders go under: Ray's deepest Unix socket there is the warm
# Ray's <TMPDIR>/hpolocal-XXXXXXXX/r/session_<date>_<time>_<us>_<pid>/sockets/plasma_store,
# 84 bytes more (a pid of 7 digits), and such a path holds at most 107.
TMPDIR_MAX = 23


def temp_parent() -> Path:
    """Where a run's private folders go: $TMPDIR, as Ray's own default and other tools
    would (a site may point it at a node's local disk, or a job's own folder), where it is
    an absolute path to a folder this user may write in, short enough for Ray's socket
    paths; else /tmp."""
    wanted = os.environ.get("TMPDIR", "").rstrip("/")
    if (os.path.isabs(wanted) and len(os.fsencode(wanted)) <= TMPDIR_MAX
            and os.path.isdir(wanted) and os.access(wanted, os.W_OK | os.X_OK)):
        return Path(wanted)
    return Path("/tmp")
