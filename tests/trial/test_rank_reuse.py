"""Warm ranks: a data-parallel trial after the first of its shape reuses the rank
processes of the one before, on real Horovod (Gloo) and real torch DDP inside real Ray Tune;
nothing of one trial reaches the next; failed groups and other shapes get new ranks."""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from calls import trial_rows
from torch import nn

import hpo
from hpo import dist

pytestmark = pytest.mark.slow
BACKENDS = ["horovod", "ddp"]
_CALLS = [0]  # module state the trainable changes: a leak shows as 2 in a later trial


class SlowToSend(RuntimeError):
    """Reaches the trial well after errors its peers raise later."""

    def __reduce__(self) -> Any:
        if not self.__dict__.get("sent"):  # Ray may pickle it more than once: slow once
            self.sent = True
            time.sleep(3)
        return super().__reduce__()


def probe(config: dict[str, Any]) -> None:
    """Records what it finds on its rank (pid, RNG draws, state an earlier trial may have left),
    then leaves state behind on purpose and trains a seeded model for `epochs` reports."""
    _CALLS[0] += 1
    found = {"pid": os.getpid(), "calls": _CALLS[0], "env": os.environ.get("HPO_PROBE"),
             "dtype": str(torch.get_default_dtype()), "cwd": os.getcwd(),
             "torch": torch.rand(4).tolist(), "numpy": np.random.rand(2).tolist()}
    with open(Path(config["out"], f"rank{dist.rank()}.jsonl"), "a") as file:
        file.write(json.dumps(found) + "\n")
    os.environ["HPO_PROBE"] = "left by a trial"
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(1234)
    np.random.seed(1234)
    os.chdir(config["out"])
    _train(config)


def _train(config: dict[str, Any]) -> None:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(64, 4, generator=generator, dtype=torch.float32)
    y = x.sum(1, keepdim=True)
    model = nn.Linear(4, 1).to(torch.float32)
    with torch.no_grad():
        model.weight.copy_(torch.linspace(-1, 1, 4, dtype=torch.float32))
    model, optimizer = dist.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05))
    for epoch in range(config.get("epochs", 1)):
        for rows in dist.batches(len(x), epoch, 16, seed=5):
            loss = nn.functional.mse_loss(model(x[rows]), y[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if config.get("abort_rank") == dist.rank():  # as NCCL's watchdog ends a cut-off rank
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file left
            os.abort()
        if config.get("late_fail_rank") == dist.rank():  # as a peer cut off by the failure
            time.sleep(1.5)
            raise ConnectionError("probe: Connection closed by peer")
        if config.get("fail_rank") == dist.rank():
            raise (SlowToSend if config.get("slow") else RuntimeError)("probe: this rank fails")
        hpo.report({"loss": dist.allreduce_mean(loss), "size": dist.size()})


def _spec(tmp_path: Path, backend: str, **extra: Any) -> dict[str, Any]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return {"name": f"reuse-{backend}", "trainable": f"{__file__}:probe", "metric": "loss",
            "mode": "min", "storage": str(tmp_path), "num_samples": 3,
            "distributed": {"backend": backend, "workers": 2},
            **extra, "constants": {"out": str(out), **extra.get("constants", {})}}


def _found(tmp_path: Path, rank: int) -> list[dict[str, Any]]:
    lines = (tmp_path / "out" / f"rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _check_fresh_state(tmp_path: Path, trials: int) -> None:
    torch.manual_seed(1234)
    left_torch = torch.rand(4).tolist()
    np.random.seed(1234)
    left_numpy = np.random.rand(2).tolist()
    for rank in (0, 1):
        found = _found(tmp_path, rank)
        assert len(found) == trials
        assert len({row["pid"] for row in found}) == 1, found  # one warm process per rank
        for row in found:  # nothing the last trial left behind
            assert (row["calls"], row["env"], row["dtype"]) == (1, None, "torch.float32"), row
            assert row["cwd"] != str(tmp_path / "out")
            assert row["torch"] != left_torch and row["numpy"] != left_numpy
        # as on the first trial's new processes: torch at its fixed start seed, NumPy from the OS
        assert [row["torch"] for row in found] == [found[0]["torch"]] * trials, found
        assert len({tuple(row["numpy"]) for row in found}) == trials, found


@pytest.mark.parametrize("backend", BACKENDS)
def test_trials_reuse_warm_ranks_and_inherit_nothing(tmp_path: Path, backend: str) -> None:
    result = hpo.run(_spec(tmp_path, backend, constants={"epochs": 2}), num_cpus=2)
    assert set(result.dataframe["status"]) == {"TERMINATED"}
    _check_fresh_state(tmp_path, 3)
    trials = list(trial_rows(result.path).values())
    assert all([row["ranks"] for row in rows] == [2, 2] for rows in trials)
    losses = [[row["loss"] for row in rows] for rows in trials]
    assert losses[1] == losses[0] == losses[2]  # reused ranks: exactly the fresh ranks' losses


@pytest.mark.parametrize("backend", BACKENDS)
def test_trials_stopped_by_tune_hand_their_ranks_on(tmp_path: Path, backend: str) -> None:
    """Every rank learns Tune's decision at its report (a DDP rank would otherwise wait in its
    next collective for a rank 0 that left), so a stopped trial's ranks serve the next."""
    spec = _spec(tmp_path, backend, constants={"epochs": 4}, stop={"training_iteration": 1})
    result = hpo.run(spec, num_cpus=2)
    assert list(result.dataframe["iterations"]) == [1, 1, 1]  # each one stopped mid-way
    _check_fresh_state(tmp_path, 3)


@pytest.fixture
def local_ray(tmp_path: Path) -> Any:
    """An embedded Ray in this process, so the trial-process side runs here, outside Tune."""
    from hpo.driver.backends.ray_session import embedded_ray
    from hpo.trial.ranks import pool

    with embedded_ray(tmp_path / "ray.log", num_cpus=2, keep=True):
        yield
        pool.close_parked()


def _trial_here(tmp_path: Path, workers: int = 2, **config: Any) -> list[int]:
    """One trial's ranks driven from this process as a trial process would; their pids."""
    from hpo.driver.run.trainable import resolve
    from hpo.spec.model import Distributed
    from hpo.trial.ranks.trial import _run_ranks

    before = [len(_found(tmp_path, rank)) if (tmp_path / "out" / f"rank{rank}.jsonl").exists()
              else 0 for rank in range(workers)]
    spec = Distributed(backend="ddp", workers=workers)
    func, _ = resolve(f"{__file__}:probe", "test")  # by value: Ray's workers cannot import it
    _run_ranks(func, {"out": str(tmp_path / "out"), **config}, spec, 0)
    return [_found(tmp_path, rank)[before[rank]]["pid"] for rank in range(workers)]


def _gone(pids: list[int], within_s: float = 30) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() for pid in pids):
            return True
        time.sleep(0.1)  # polling for an exit, not waiting for readiness
    return False


def test_failed_trial_and_other_shape_get_new_ranks(tmp_path: Path, local_ray: Any) -> None:
    from hpo.trial.ranks.trial import RankFailure

    (tmp_path / "out").mkdir()
    first = _trial_here(tmp_path)
    assert _trial_here(tmp_path) == first  # reused
    with pytest.raises(RankFailure, match="rank 1 failed: RuntimeError: probe: this rank fails"):
        _trial_here(tmp_path, fail_rank=1)
    assert _gone(first)  # the failed trial's ranks were shut down, not parked
    second = _trial_here(tmp_path)
    assert not set(second) & set(first)
    one = _trial_here(tmp_path, workers=1)  # another shape: new ranks, the parked ones ended
    assert one[0] not in second and _gone(second)


def test_the_rank_that_failed_first_is_blamed_not_the_peer_it_cut_off(
        tmp_path: Path, local_ray: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI once blamed rank 0's "Connection closed by peer" for rank 1's error: whichever
    reaches the trial first. Here rank 0 raises 1.5 s after rank 1 but its error arrives ~1.5 s
    before rank 1's: the trial still names rank 1 and its own error."""
    from hpo.trial.ranks import trial
    from hpo.trial.ranks.trial import RankFailure

    monkeypatch.setattr(trial, "PEER_GRACE_S", 60.0)  # rank 1's error arrives in time, loaded
    (tmp_path / "out").mkdir()
    with pytest.raises(RankFailure, match="rank 1 failed: SlowToSend: probe: this rank fails"):
        _trial_here(tmp_path, fail_rank=1, slow=True, late_fail_rank=0)


def test_a_rank_aborted_after_its_peer_failed_is_not_blamed_for_the_peers_error(
        tmp_path: Path, local_ray: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """NCCL's watchdog aborts a rank whose peer left the group after an error of its own (a
    CUDA out-of-memory, say): the aborted rank's death may reach the trial first, and once
    was blamed ("died") ahead of the error that began it. Here rank 0 aborts at once while
    rank 1 raises: the trial names rank 1 and its own error."""
    from hpo.trial.ranks import trial
    from hpo.trial.ranks.trial import RankFailure

    monkeypatch.setattr(trial, "PEER_GRACE_S", 60.0)  # both ends reach the trial, loaded
    (tmp_path / "out").mkdir()
    with pytest.raises(RankFailure, match="rank 1 failed: RuntimeError: probe: this rank fails"):
        _trial_here(tmp_path, fail_rank=1, abort_rank=0)


def test_a_rank_that_died_first_is_blamed_not_the_peer_it_cut_off(
        tmp_path: Path, local_ray: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank's process dies with nothing noted (killed, a segfault); its peer's collective
    then fails on the lost connection and reaches the trial as an error: the dead rank is
    blamed."""
    from hpo.trial.ranks import trial
    from hpo.trial.ranks.trial import RankFailure

    monkeypatch.setattr(trial, "PEER_GRACE_S", 60.0)
    (tmp_path / "out").mkdir()
    with pytest.raises(RankFailure, match=r"rank 1 failed: \w*Actor\w*Error"):
        _trial_here(tmp_path, abort_rank=1, late_fail_rank=0)


def test_a_rank_noted_with_its_own_error_is_blamed_before_its_error_arrives(
        tmp_path: Path, local_ray: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank notes its error as it fails (its own, or a peer's loss): the trial blames it
    even where its error reaches the trial after the peers' grace (a slow send here; a slow
    leave of the group on a site), and not the cut-off peer whose error came first."""
    from hpo.trial.ranks import trial
    from hpo.trial.ranks.trial import RankFailure

    monkeypatch.setattr(trial, "PEER_GRACE_S", 0.5)
    (tmp_path / "out").mkdir()
    with pytest.raises(RankFailure, match="rank 1 failed: SlowToSend: probe: this rank fails"):
        _trial_here(tmp_path, fail_rank=1, slow=True, late_fail_rank=0)


def test_rank_count_comes_from_the_trial_resources(tmp_path: Path) -> None:
    from ray import tune

    from hpo.driver.run.trainable import resolve
    from hpo.spec.model import Distributed
    from hpo.trial.ranks.trial import distributed_trainable, rank_count

    assert rank_count(tune.PlacementGroupFactory([{}] + [{"CPU": 1}] * 3)) == 3
    assert rank_count(tune.PlacementGroupFactory([{"CPU": 1}] * 3)) == 2  # a head with CPUs
    spec = Distributed(backend="ddp", workers=2)
    (tmp_path / "out").mkdir()
    func, _ = resolve(f"{__file__}:probe", "test")
    trainable = distributed_trainable(func, spec, 0)  # asks for 2 ranks...
    grown = tune.with_resources(trainable, tune.PlacementGroupFactory([{}, {"CPU": 1}]))
    tuner = tune.Tuner(grown, param_space={"out": str(tmp_path / "out")},  # ...gets 1
                       run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0))
    (result,) = tuner.fit()
    assert (result.metrics["ranks"], result.metrics["size"]) == (1, 1)
