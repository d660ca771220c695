"""The embedded Ray a run from Python leaves running for the next run in the same process (a
notebook's next run skips Ray's start); `hpo.shutdown()` ends it, as does the interpreter's
exit. A notebook may end it itself (`ray.shutdown()`) and start its own (`ray.init()`)."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses

Args = tuple[int | None, int | None]  # the num_cpus and num_gpus it was started with


@dataclasses.dataclass(frozen=True)
class _Kept:
    stack: contextlib.ExitStack  # closing it ends the Ray and removes its files
    args: Args
    node: str | None


_kept: _Kept | None = None
# Kept Rays whose token a notebook's own Ray took over (see _end): closed at exit, after it.
_outlived: list[contextlib.ExitStack] = []


def node_id() -> str | None:
    """The node this process's Ray connection is on (None when not connected)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def shutdown_if_on(node: str | None) -> None:
    """ray.shutdown, unless this process is now on another Ray: a notebook's
    `ray.shutdown(); ray.init()` after a kept run, which is the notebook's to end."""
    import ray

    if node_id() == node:
        ray.shutdown()


def connected() -> bool:
    """This process's Ray connection is the kept Ray's."""
    return _kept is not None and node_id() == _kept.node


def take(args: Args) -> contextlib.ExitStack | None:
    """The kept Ray, for the next run, where it still runs and was started with args; any
    other kept Ray ends."""
    global _kept
    _release_outlived()
    kept, _kept = _kept, None
    if kept is None:
        return None
    if kept.args == args and node_id() == kept.node:
        return kept.stack
    _end(kept)
    return None


def keep(stack: contextlib.ExitStack, args: Args) -> None:
    """Leave the Ray this process is connected to running for the next run."""
    global _kept
    node = node_id()
    if node is None:  # not connected after all: nothing to keep
        stack.close()
        return
    _kept = _Kept(stack, args, node)
    atexit.unregister(_at_exit)  # registered once, to remove the run dir at exit
    atexit.register(_at_exit)


def shutdown() -> None:
    """End the kept Ray (no-op when none is kept)."""
    global _kept
    kept, _kept = _kept, None
    if kept is not None:
        _end(kept)
    _release_outlived()


def _end(kept: _Kept) -> None:
    if node_id() not in (None, kept.node):
        # The notebook ended this Ray and its ray.init started another while os.environ
        # still named this one's token: that Ray runs on the token's file and on the auth
        # settings closing the stack would put back. Ended at exit, after that Ray.
        _outlived.append(kept.stack)
    else:
        kept.stack.close()


def _release_outlived() -> None:
    """Close the kept Rays whose token a notebook's own Ray took over, once no Ray runs."""
    if node_id() is None:
        while _outlived:
            _outlived.pop().close()


def _at_exit() -> None:
    shutdown()
    if _outlived:  # before Ray's own handler ends the notebook's Ray: end it first
        import ray

        ray.shutdown(_exiting_interpreter=True)
        _release_outlived()
