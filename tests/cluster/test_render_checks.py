"""What `hpo slurm render/submit` checks before it writes a job that could never run: a venv
without hpo, GPUs a trial asks for in a job that asks for none, and the partition's limits as
Slurm states them (`scontrol show partition`), for partitions no site profile lists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from calls import cli_invoke

from hpo.cluster.partition import Partition, chosen, over_limits, parse_partitions

SPACE = """
name: checked
trainable: tests/support/study_trainables.py:steady
metric: score
mode: max
search_space:
  x: {uniform: [0.0, 1.0]}
resources: {cpus_per_trial: 1, gpus_per_trial: %s}
"""


def _space(tmp_path: Path, gpus: str = "0", slurm: str = "") -> Path:
    space = tmp_path / "s.yaml"
    space.write_text(SPACE % gpus + slurm)
    return space


def _render(space: Path, *args: str) -> tuple[int, str, str]:
    return cli_invoke(["slurm", "render", str(space), "--workdir", str(space.parent), *args])


def test_a_venv_without_hpo_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)  # as a job started elsewhere has it
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    code, _, stderr = _render(_space(tmp_path, slurm=f"slurm: {{venv: {venv}}}\n"))
    assert code == 2
    assert "slurm.venv" in stderr and "cannot import hpo" in stderr and "Hint:" in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_a_venv_with_hpo_renders(tmp_path: Path) -> None:
    code, text, stderr = _render(_space(tmp_path, slurm=f"slurm: {{venv: {sys.prefix}}}\n"))
    assert code == 0, stderr
    assert f"source {sys.prefix}/bin/activate" in text


def test_a_gpu_trial_in_a_job_without_gpus_is_refused(tmp_path: Path) -> None:
    code, _, stderr = _render(_space(tmp_path, gpus="1"))
    assert code == 2
    assert "resources.gpus_per_trial" in stderr and "asks for none" in stderr
    code, _, stderr = _render(_space(tmp_path, gpus="1"), "--gpus-per-node", "1")
    assert code == 0, stderr


def test_a_cpu_only_site_says_node_gpus_0(tmp_path: Path) -> None:
    site = tmp_path / "cpu-site.yaml"
    site.write_text("node_gpus: 0\nnode_cpus: 64\npartition: batch\n")
    code, text, stderr = _render(_space(tmp_path), "--site", str(site))
    assert code == 0, stderr
    assert "--gpus-per-node" not in text and "--gres" not in text


SHOWN = (  # scontrol show partition --oneliner (Slurm 22.05), shortened
    "PartitionName=debug AllowGroups=ALL Default=YES MaxNodes=UNLIMITED MaxTime=UNLIMITED "
    "Nodes=node[1-3] State=UP TotalCPUs=6 TotalNodes=3\n"
    "PartitionName=short Default=NO MaxNodes=2 MaxTime=00:30:00 State=UP TotalNodes=8\n"
    "PartitionName=long Default=NO MaxNodes=UNLIMITED MaxTime=2-00:00:00 TotalNodes=4\n")


def test_partitions_are_read_from_scontrol() -> None:
    found = parse_partitions(SHOWN)
    assert found == {"debug": Partition("debug", True, None, 3),
                     "short": Partition("short", False, "00:30:00", 2),
                     "long": Partition("long", False, "2-00:00:00", 4)}
    assert chosen(found, None) == found["debug"] and chosen(found, "gone") is None


@pytest.mark.parametrize("partition, time, nodes, keys", [
    ("debug", "30-00:00:00", 3, []),  # unlimited time; all 3 nodes
    ("debug", "01:00:00", 4, ["nodes"]),  # more than the partition has
    ("short", "00:30:00", 2, []),  # at the limits
    ("short", "00:30:01", 2, ["time"]),
    ("short", "01:00:00", 3, ["time", "nodes"]),  # MaxNodes, though 8 are there
    ("long", "2-00:00:00", 4, []),
    ("long", "2-00:00:01", 1, ["time"]),
])
def test_a_job_over_its_partition_is_found(partition: str, time: str, nodes: int,
                                           keys: list[str]) -> None:
    part = parse_partitions(SHOWN)[partition]
    assert [key for key, _, _ in over_limits(part, time, nodes)] == keys


def _fake_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
                   code: int = 0) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}EOF\nexit {code}\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")


def test_render_refuses_a_job_over_the_partition_slurm_states(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_scontrol(tmp_path, monkeypatch, SHOWN)
    space = _space(tmp_path)
    code, _, stderr = _render(space, "-p", "short", "--time", "02:00:00")
    assert code == 2
    assert stderr.strip().splitlines() == [
        f"error: {space}: --time: 02:00:00 is over partition short's MaxTime of 00:30:00 "
        "(scontrol show partition): the job would pend forever. Hint: ask for at most "
        "00:30:00"]
    code, _, stderr = _render(space, "--nodes", "4")  # the default partition, debug
    assert code == 2 and "--nodes: 4 nodes" in stderr and "at most 3" in stderr
    code, _, stderr = _render(space, "-p", "short", "--time", "00:20:00", "-N", "2")
    assert code == 0, stderr


def test_render_says_nothing_where_slurm_cannot_be_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_scontrol(tmp_path, monkeypatch, "slurm_load_partitions: Unable to contact\n", 1)
    code, _, stderr = _render(_space(tmp_path), "-p", "short", "--time", "02:00:00")
    assert code == 0 and "scontrol" not in stderr
