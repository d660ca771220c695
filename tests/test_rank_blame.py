"""Which errors of a data-parallel trial's ranks say only that a peer left or died
(hpo.trial.ranks.trial.lost_peer): those are never blamed ahead of a rank's own error."""

from __future__ import annotations

import pytest

from hpo.trial.ranks.trial import lost_peer


class DistBackendError(RuntimeError):
    """Named as torch.distributed's, which NCCL's errors are raised as."""


class HorovodInternalError(RuntimeError):
    """Named as Horovod's."""


class Caused(RuntimeError):
    """Carries its cause as Ray's RayTaskError does."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__("ray task error")
        self.cause = cause


@pytest.mark.parametrize("error", [
    RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
                 "peer [10.0.0.2]:4567"),
    RuntimeError("[gloo/transport/tcp/pair.cc:598] Connection reset by peer"),
    ConnectionResetError(104, "Connection reset by peer"),
    BrokenPipeError(32, "Broken pipe"),
    DistBackendError("NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there "
                     "was a network error, NCCL version 2.21.5"),
    RuntimeError("NCCL communicator was aborted on rank 1."),
    HorovodInternalError("Horovod has been shut down."),
    RuntimeError("[gloo] Timed out waiting 1800000ms for recv operation to complete"),
    Caused(RuntimeError("Connection closed by peer")),
])
def test_a_peers_loss_is_recognised(error: BaseException) -> None:
    assert lost_peer(error)


@pytest.mark.parametrize("error", [
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    ValueError("probe: this rank fails"),
    KeyError("loss"),
    Caused(ZeroDivisionError("division by zero")),
])
def test_a_ranks_own_error_is_not_a_peers_loss(error: BaseException) -> None:
    assert not lost_peer(error)
