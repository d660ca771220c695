"""`hpo doctor`'s GPU section, judged from facts (no GPU here): each mismatch is a NO row with
its one-line fix, and a healthy GPU install gives none."""

from __future__ import annotations

import pytest

from hpo.cli.doctor_gpu import GpuFacts, _version_code, gpu_rows, probe_gpu

CUDA_OK = GpuFacts(driver="nvidia-smi: 580.95", torch_cuda="13.0", devices=4,
                   torch_nccl=(2, 27, 7), horovod={"gloo": 1, "nccl": 22707, "rocm": 0, "mpi": 0},
                   env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})


def _bad(facts: GpuFacts) -> list[str]:
    return [f"{what}: {finding}" for what, finding, fine in gpu_rows(facts) if not fine]


@pytest.mark.parametrize(("code", "version"), [(22707, (2, 27)), (21805, (2, 18)),
                                               (2405, (2, 4))])
def test_nccl_version_codes(code: int, version: tuple[int, int]) -> None:
    assert _version_code(code) == version


def test_a_healthy_cuda_install_has_no_finding() -> None:
    assert _bad(CUDA_OK) == []
    assert ("nccl (torch)", "2.27.7", True) in gpu_rows(CUDA_OK)


@pytest.mark.parametrize(("change", "expected"), [
    ({"horovod": {"gloo": 1, "nccl": 21805, "rocm": 0, "mpi": 0}},
     "built against NCCL 2.18, torch loads 2.27.7"),
    ({"horovod": {"gloo": 1, "nccl": 0, "rocm": 0, "mpi": 0}}, "Horovod has no NCCL/RCCL"),
    ({"torch_cuda": None}, "torch is a CPU build"),
    ({"torch_cuda": None, "torch_hip": "6.2", "env": {"ROCR_VISIBLE_DEVICES": "0,1"}},
     "ROCR_VISIBLE_DEVICES set without HIP_VISIBLE_DEVICES"),
])
def test_each_mismatch_is_one_line_with_a_fix(change: dict, expected: str) -> None:
    facts = GpuFacts(**{**CUDA_OK.__dict__, **change})
    bad = _bad(facts)
    assert len(bad) == 1 and expected in bad[0] and "Hint:" in bad[0], bad


def test_rocm_names_the_miopen_cache() -> None:
    facts = GpuFacts(torch_hip="6.2", devices=8, env={"HIP_VISIBLE_DEVICES": "0",
                                                     "MIOPEN_USER_DB_PATH": "/tmp/j/miopen"})
    rows = {what: finding for what, finding, _ in gpu_rows(facts)}
    assert rows["miopen cache"] == "MIOPEN_USER_DB_PATH=/tmp/j/miopen"
    assert rows["torch GPU build"] == "ROCm (HIP 6.2)"


def test_probe_reads_this_machine() -> None:
    import torch

    facts = probe_gpu()
    assert facts.torch_cuda == torch.version.cuda
    if torch.cuda.is_available():  # a GPU machine: devices and the NCCL torch loads
        assert facts.devices == torch.cuda.device_count() and facts.torch_nccl is not None
    else:  # CI: a CPU build of torch
        assert facts.devices == 0 and facts.torch_nccl is None
    assert facts.horovod is not None and facts.horovod["gloo"] == 1
