"""Which errors of a data-parallel trial's ranks say only that a peer left or died
(hpo.trial.ranks.blame.lost_peer): those are never blamed ahead of a rank's own error."""

from __future__ import annotations

import pytest

from hpo.trial.ranks.blame import described, lost_peer


class DistBackendError(RuntimeError):
    """As torch.distributed's, which NCCL's errors are raised as."""

    __module__ = "torch.distributed"


class DistNetworkError(RuntimeError):
    __module__ = "torch.distributed"


class HorovodInternalError(RuntimeError):
    __module__ = "horovod.common.exceptions"


class ConnectionError(OSError):  # noqa: A001  (named as requests' is, in a library of its own)
    __module__ = "requests.exceptions"


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
    DistBackendError("NCCL communicator was aborted on rank 1."),
    DistNetworkError("Connection reset by peer"),
    HorovodInternalError("Horovod has been shut down."),
    RuntimeError("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
                 "waiting 1800000ms for recv operation to complete"),
    RuntimeError("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)"),
    Caused(RuntimeError("Connection closed by peer")),
])
def test_a_peers_loss_is_recognised(error: BaseException) -> None:
    assert lost_peer(error)


@pytest.mark.parametrize("error", [
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    DistBackendError("NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
                     "Last error: Cuda failure 'out of memory'"),
    DistBackendError("NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"),
    ValueError("probe: this rank fails"),
    KeyError("loss"),
    TimeoutError("timed out"),  # socket.timeout
    RuntimeError("DataLoader timed out after 30 seconds"),
    ConnectionRefusedError(111, "Connection refused"),  # a tracking server down, say
    ConnectionError("('Connection aborted.', ConnectionResetError(104, 'Connection reset by "
                    "peer'))"),
    Caused(ZeroDivisionError("division by zero")),
])
def test_a_ranks_own_error_is_not_a_peers_loss(error: BaseException) -> None:
    assert not lost_peer(error)


def test_an_error_is_described_by_its_cause_in_one_line() -> None:
    assert described(Caused(ValueError("first\nprobe: this rank fails\n"))) == (
        "ValueError: probe: this rank fails")
    assert described(KeyError()) == "KeyError: "
