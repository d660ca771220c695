"""Which rank of a failed data-parallel trial began the failure. One rank's error fails its
peers: their next collective raises a lost connection, or their process dies (NCCL's watchdog
aborts a rank whose peer left the group, TORCH_NCCL_ASYNC_ERROR_HANDLING). Each rank says, as
it fails, whether its error is its own or only a peer's loss (hpo.trial.ranks.rank); the
trial blames the first rank with an error of its own (hpo.trial.ranks.trial)."""

from __future__ import annotations

import re

# A peer's loss as the backends raise it: Python's lost connections, torch.distributed's
# network and store errors, Horovod's shut-down; others by their words (Gloo's, NCCL's), in
# an error of Python's, torch's or Horovod's own classes (never another library's: a
# tracking server's "Connection reset by peer" is the rank's own trouble).
_LOST_BUILTINS = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)
_LOST_CLASSES = frozenset({("torch", "DistNetworkError"), ("torch", "DistStoreError"),
                           ("horovod", "HorovodInternalError")})
_LOST_TEXT = re.compile(r"connection (closed|reset) by peer|broken pipe|remote process exit|"
                        r"communicator was aborted|ncclRemoteError|"
                        r"timed out waiting \d+ ?ms for (recv|send)|"
                        r"watchdog caught collective operation timeout", re.I)
_OWN_TEXT = re.compile(r"out of memory|CUDA error", re.I)  # a rank's own, in any words
_BACKENDS = ("builtins", "torch", "horovod")


def lost_peer(exc: BaseException) -> bool:
    """Whether a rank's error says only that a peer of its group left or died (for an error
    that reached the trial through Ray, its cause)."""
    cause = getattr(exc, "cause", None) or exc
    kind, text = type(cause), str(cause)
    if kind.__module__.split(".")[0] not in _BACKENDS or _OWN_TEXT.search(text):
        return False
    named = {(cls.__module__.split(".")[0], cls.__name__) for cls in kind.__mro__}
    return (isinstance(cause, _LOST_BUILTINS) or bool(named & _LOST_CLASSES)
            or bool(_LOST_TEXT.search(text)))


def described(exc: BaseException) -> str:
    """An error in one line: its class and the last line of its message (for an error that
    reached the trial through Ray, its cause's)."""
    cause = getattr(exc, "cause", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"
