"""Checkpoint files: the temporary folders hpo writes a checkpoint into (hpo-ckpt-*) and
restores one into (hpo-restore-*) are gone once the run ends, whether the trial returned,
failed and was restored, or was stopped by Tune; a checkpoint restores onto the trial's own
device. Real Ray runs with TMPDIR pointed at a folder of the test's own."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from calls import ROOT, trial_rows

import hpo
from hpo.trial import checkpoint_files, dist, session

HERE = "tests/driver/test_checkpoint_files.py"
LEFT = ("hpo-ckpt-*", "hpo-restore-*")


def steps(config: dict[str, Any]) -> None:
    """`steps` reports, each with a checkpoint (a dict, or a folder with `kind: dir`); rank 0
    fails once at `fail_at` (a marker under `marker_dir` lets the retry live). Only rank 0:
    another rank failing first would end the attempt before rank 0 reached its own failing
    step, which the retry would then hit, past max_failures (seen under load)."""
    state = hpo.get_checkpoint()
    if config["kind"] == "dir" and state is not None:
        state = {"step": int(Path(state, "step.txt").read_text())}
    start = state["step"] + 1 if state else 1
    for step in range(start, config["steps"] + 1):
        marker = Path(config["marker_dir"], "failed")
        if step == config.get("fail_at") and dist.rank() == 0 and not marker.exists():
            marker.touch()
            raise RuntimeError("failing once, to be restored")
        metrics = {"score": step, "start": start, "tmp": tempfile.gettempdir()}
        if config["kind"] == "dir":
            folder = Path(tempfile.mkdtemp(prefix="user-ckpt-"))  # the user's own: not ours
            (folder / "step.txt").write_text(str(step))
            hpo.report(metrics, checkpoint=str(folder))
        else:
            hpo.report(metrics, checkpoint={"step": step})


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """TMPDIR for this process and the Ray it starts (a new one: its workers inherit it)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    hpo.shutdown()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() caches its answer
    yield folder
    hpo.shutdown()  # its workers hold TMPDIR: not for the next test


def _left(folder: Path) -> list[str]:
    return sorted(path.name for pattern in LEFT for path in folder.glob(pattern))


def _spec(tmp_path: Path, name: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "trainable": f"{HERE}:steps", "metric": "score", "mode": "max",
            "storage": str(tmp_path / "results"), "checkpoint": {"frequency": 1},
            "failure": {"max_failures": 1}, **extra,
            "constants": {"steps": 4, "kind": kind, "fail_at": 3,
                          "marker_dir": str(tmp_path), **extra.get("constants", {})}}


@pytest.mark.parametrize("kind", ["dict", "dir"])
def test_one_process_trials_leave_no_checkpoint_folders(tmp_path: Path, own_tmp: Path,
                                                       kind: str) -> None:
    result = hpo.run(_spec(tmp_path, kind, kind), num_cpus=2)
    ((rows),) = trial_rows(result.path).values()
    assert [row["start"] for row in rows] == [1, 1, 3, 3]  # restored once
    assert {row["tmp"] for row in rows} == {str(own_tmp)}  # the trial's temp dir is ours
    assert _left(own_tmp) == []


def test_stopped_one_process_trials_leave_no_checkpoint_folders(tmp_path: Path,
                                                                own_tmp: Path) -> None:
    spec = _spec(tmp_path, "stopped", "dict", num_samples=2, stop={"training_iteration": 2},
                 constants={"fail_at": None})
    result = hpo.run(spec, num_cpus=2)
    assert list(result.dataframe["iterations"]) == [2, 2]
    assert _left(own_tmp) == []


@pytest.mark.slow  # about 10 s each: data-parallel trials of two rank processes
@pytest.mark.parametrize("kind", ["dict", "dir"])
def test_data_parallel_trials_leave_no_checkpoint_folders(tmp_path: Path, own_tmp: Path,
                                                         kind: str) -> None:
    spec = _spec(tmp_path, f"ddp-{kind}", kind,
                 distributed={"backend": "ddp", "workers": 2, "cpus_per_worker": 1})
    result = hpo.run(spec, num_cpus=2)
    ((rows),) = trial_rows(result.path).values()
    assert [row["start"] for row in rows] == [1, 1, 3, 3]  # the trial restored once
    assert _left(own_tmp) == []


# Restoring onto the trial's device: torch's location tags, saved as a GPU rank would.

@pytest.mark.parametrize(("saved", "device", "restored"), [
    ("cpu", "cuda:1", "cpu"),  # CPU state (an RNG state) stays where torch needs it
    ("cuda:0", "cuda:1", "cuda:1"),  # Horovod's rank 1 sees the node's GPUs: its own
    ("cuda:3", "cuda:0", "cuda:0"),  # saved by another node's rank 3; DDP's rank sees one
    ("cuda:0", "cpu", "cpu"),  # a GPU checkpoint on a CPU-only node
])
def test_a_saved_tensor_restores_onto_this_ranks_device(saved: str, device: str,
                                                        restored: str) -> None:
    assert checkpoint_files.restore_location(saved, device) == restored


def _saved_on(folder: Path, location: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint as hpo writes it, its tensors tagged as saved on `location`."""
    with monkeypatch.context() as patch:
        patch.setattr(torch.serialization, "location_tag", lambda storage: location)
        checkpoint_files.write(folder, {"w": torch.ones(2), "step": 3}, reports=1)


def test_a_gpu_checkpoint_restores_on_a_cpu_only_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _saved_on(tmp_path, "cuda:1", monkeypatch)
    state = checkpoint_files.load_state(tmp_path, "cpu")  # torch.load alone: "no CUDA device"
    assert state["w"].device == torch.device("cpu") and state["w"].tolist() == [1.0, 1.0]


def test_gpu_tensors_are_restored_onto_the_ranks_own_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Horovod's local rank 1 restoring what rank 0 saved on cuda:0 (no GPU here: the move
    itself is recorded, not made)."""
    _saved_on(tmp_path, "cuda:0", monkeypatch)
    asked: list[str] = []

    def restore(storage: object, location: str) -> object:
        asked.append(location)
        return storage

    monkeypatch.setattr(torch.serialization, "default_restore_location", restore)
    checkpoint_files.load_state(tmp_path, "cuda:1")
    assert asked == ["cuda:1"]


# The scratch folders themselves.

def test_a_restored_folder_goes_when_the_trial_ends(own_tmp: Path) -> None:
    with session.trial_session(checkpoint_every=1):
        folder = session.restore_folder()
        assert folder.parent == own_tmp and folder.is_dir()
    assert not folder.exists()


def test_the_folders_of_a_killed_process_go_with_the_next_ones(
        own_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    host = socket.gethostname()
    dead = own_tmp / f"hpo-ckpt-{done.stdout.strip()}@{host}@x1"
    alive = own_tmp / f"hpo-restore-{os.getppid()}@{host}@x2"
    elsewhere = own_tmp / f"hpo-ckpt-{done.stdout.strip()}@{host}-2@x3"  # shared TMPDIR
    users = own_tmp / f"hpo-ckpt-{done.stdout.strip()}"  # not hpo's scratch naming
    for folder in (dead, alive, elsewhere, users):
        folder.mkdir()
    monkeypatch.setattr(session, "_sweep_dead_owners",
                        session._sweep_dead_owners.__wrapped__)  # not once per process here
    session.remove_scratch(session.scratch_folder("hpo-ckpt"))
    assert not dead.exists() and alive.exists() and elsewhere.exists() and users.exists()


def test_a_pickled_checkpoint_loads_without_importing_torch(tmp_path: Path) -> None:
    """A trial without torch restores without it (asking for its device imports torch, and
    a trial with torch loaded saves its next checkpoints with torch)."""
    code = ("import sys; from pathlib import Path; from hpo.trial import checkpoint_files as c; "
            "folder = Path(sys.argv[1]); c.write(folder, {'step': 3}, reports=1); "
            "assert c.load(folder) == {'step': 3}; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr
