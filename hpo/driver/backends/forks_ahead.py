"""The run folder and the fork server started ahead of a run: `hpo run` starts them before it
imports what it needs, and the embedded Ray's start takes them (hpo.driver.backends.ray_session).
"""

from __future__ import annotations

import atexit
import contextlib
from pathlib import Path

from hpo.ray_adapters.fast_start.fork_server import ForkServer, available, serving

# The run folder and fork server that start_ahead made for the next embedded Ray of this
# process, with the stack that ends them, until that Ray's start takes them.
_ahead: tuple[contextlib.ExitStack, Path, ForkServer | None] | None = None


def start_ahead(env: dict[str, str] | None = None) -> None:
    """Make the run folder and start the fork server now (in `env`: by default this
    process's), before `hpo run` imports what it needs: the server's own imports (numpy,
    pandas, pyarrow: about 0.8 CPU-s) then use the core the driver's imports leave idle,
    instead of coming after them (on 2 cores the first trial waited for the server). The next
    Ray's start (or a warm Ray's run) takes them (taken_ahead); untaken, they end with the
    process. A folder that cannot be made leaves nothing ahead: the start makes its own."""
    global _ahead
    if _ahead is not None or not available():
        return
    from hpo.cluster.run_dir import private_run_dir

    stack = contextlib.ExitStack()
    try:
        run_dir = stack.enter_context(private_run_dir())
        server = stack.enter_context(serving(run_dir, env))
    except OSError:  # the start meets it again, and says so where it must
        stack.close()
        return
    except BaseException:
        stack.close()
        raise
    _ahead = (stack, run_dir, server)
    atexit.register(end_ahead)


def taken_ahead() -> tuple[contextlib.ExitStack, Path, ForkServer | None] | None:
    """What start_ahead made, from now on the caller's to end (None: nothing ahead)."""
    global _ahead
    ahead, _ahead = _ahead, None
    return ahead


def end_ahead() -> None:
    """End what start_ahead made, unless a Ray's start has taken it."""
    ahead = taken_ahead()
    if ahead is not None:
        ahead[0].close()
