"""Cost per trial: cpu_hours and gpu_hours (wall time x the trial's resources, carried across a
restore) and energy_j from the trial's own GPUs, in every result a trial reports. Real Ray and
real DDP ranks; the GPUs are Ray resources declared by RAY_OVERRIDE_RESOURCES and read through a
fake `pynvml` (the names and units of nvidia-ml-py), since this machine has none."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from calls import ROOT, SUPPORT, cli_invoke, hpo_cli, trial_rows

import hpo
from hpo.reporting import build_report
from hpo.results import load_results
from hpo.trial import cost

HERE = "tests/trial/test_cost.py"
DP_TRAINABLES = str(SUPPORT / "dp_trainables.py")


def timed(config: dict[str, Any]) -> None:
    """`steps` reports `sleep` s apart, each with a checkpoint; raises once at `fail_at` (a
    marker file under `marker_dir` lets the retry live)."""
    began = time.monotonic()
    state = hpo.get_checkpoint()
    start = state["step"] + 1 if state else 1
    for step in range(start, config["steps"] + 1):
        time.sleep(config["sleep"])
        marker = Path(config.get("marker_dir", "."), "failed")
        if step == config.get("fail_at") and not marker.exists():
            marker.touch()
            raise RuntimeError("failing once, to be restored")
        hpo.report({"score": step, "start": start, "elapsed": time.monotonic() - began,
                    **_gpu_facts()}, checkpoint={"step": step})


def _gpu_facts() -> dict[str, Any]:
    import ray

    facts: dict[str, Any] = {"gpu_ids": ",".join(sorted(map(str, ray.get_gpu_ids())))}
    if "pynvml" in sys.modules:  # the fake one: how often the counters were read so far
        facts["nvml_reads"] = sys.modules["pynvml"].reads
    return facts


def _check_hours(row: dict[str, Any], cpus: float, gpus: float, seconds: float,
                 slack: float = 0.5) -> None:
    """cpu_hours and gpu_hours are `seconds` of wall time x the trial's CPUs and GPUs."""
    assert row["cpu_hours"] * 3600 / cpus == pytest.approx(seconds, rel=0.05, abs=slack)
    assert row["gpu_hours"] == pytest.approx(gpus * row["cpu_hours"] / cpus)


# Pure parts: the sums and the record a checkpoint keeps.

def test_a_run_adds_its_time_x_its_resources_to_what_earlier_runs_cost() -> None:
    carried = cost.Totals(cpu_hours=1.0, gpu_hours=2.0, energy_j=10.0)
    joules = iter([100.0, 160.0])  # the counter at the run's start, then at a report
    meter = cost.Meter(cpus=4, gpus=0.5, carried=carried, started=50.0,
                       energy=lambda: next(joules))
    assert meter.totals(now=50.0 + 1800) == cost.Totals(3.0, 2.25, 70.0)


@pytest.mark.parametrize(("record", "metrics"), [
    ({"cpu_hours": 1.5, "gpu_hours": 0.5, "energy_j": 9.0},
     {"cpu_hours": 1.5, "gpu_hours": 0.5, "energy_j": 9.0}),
    ({"cpu_hours": 1.5, "gpu_hours": 0.0, "energy_j": None}, {"cpu_hours": 1.5, "gpu_hours": 0}),
    (None, {"cpu_hours": 0.0, "gpu_hours": 0.0}),  # a checkpoint from before: energy unknown
])
def test_energy_is_absent_once_any_run_could_not_measure_it(
        record: dict[str, Any] | None, metrics: dict[str, float]) -> None:
    carried = cost.Totals.from_record(record)
    assert carried.metrics() == metrics
    meter = cost.Meter(cpus=1, gpus=1, carried=carried, started=0.0, energy=lambda: 5.0)
    assert ("energy_j" in meter.totals(now=1.0).metrics()) == ("energy_j" in metrics)


def test_a_key_the_trainable_reported_itself_is_kept() -> None:
    totals = cost.Totals(cpu_hours=2.0, gpu_hours=0.0, energy_j=None)
    assert cost.added({"cpu_hours": 7, "loss": 1}, totals, now=12.5) == {
        "cpu_hours": 7, "gpu_hours": 0.0, cost.REPORT_TIME: 12.5, "loss": 1}
    assert cost.added({"loss": 1}, None) == {"loss": 1}  # outside a trial: nothing added


# Energy counters: a fake pynvml with the real one's names and units, and none at all.

FAKE_PYNVML = '''
"""nvidia-ml-py's names and units; device i draws (i + 1) x 100 W; `reads` counts readings."""
import time

reads = 0


class NVMLError(Exception):
    pass


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return 2


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < 2:
        raise NVMLError("Invalid Argument")
    return index


def nvmlDeviceGetHandleByUUID(uuid):
    raise NVMLError("Not Found")


def nvmlDeviceGetTotalEnergyConsumption(handle):
    """Millijoules since the driver was loaded."""
    global reads
    reads += 1
    return int(time.time() * (handle + 1) * 100 * 1000)
'''


@pytest.fixture
def fake_pynvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "fake_nvml"
    folder.mkdir()
    (folder / "pynvml.py").write_text(textwrap.dedent(FAKE_PYNVML))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    cost._nvml.cache_clear()
    yield folder
    cost._nvml.cache_clear()
    sys.modules.pop("pynvml", None)  # imported by the test: not to be found by later ones


def test_nvml_counter_sums_the_trials_gpus_in_joules(fake_pynvml: Path) -> None:
    counter = cost.gpu_energy_counter(["0", "1"])
    assert counter is not None
    began, first = time.time(), counter()
    time.sleep(0.5)
    joules, ended = counter() - first, time.time()
    # the fake counts 100 W + 200 W from the clock: compare with the time that really passed
    assert joules == pytest.approx((ended - began) * 300, abs=0.05 * 300)


@pytest.mark.parametrize("ids", [None, [], ["MIG-4f1c2c0e-7c1f-5b1a-9a3e-0c2e3b1f2d4a"],
                                 ["7"], ["GPU-00000000-0000-0000-0000-000000000000"]])
def test_no_counter_for_gpus_the_device_does_not_count(fake_pynvml: Path,
                                                       ids: list[str] | None) -> None:
    assert cost.gpu_energy_counter(ids) is None


def test_no_counter_without_a_gpu_library_or_driver() -> None:
    """For real: here nvidia-ml-py is missing, or has no driver to load; amdsmi has no ROCm."""
    cost._nvml.cache_clear()
    assert cost.gpu_energy_counter(["0"]) is None


# AMD: a fake amdsmi with the real one's names; the node has 4 GPUs, the job sees some.

FAKE_AMDSMI = '''
"""amdsmi's names and units: 4 GPUs; GPU i has drawn (i + 1) J (its accumulator x 1 uJ)."""
ENUMERATION = True  # amdsmi_get_gpu_enumeration_info exists (ROCm 6.4 and later)


def amdsmi_init():
    pass


def amdsmi_get_processor_handles():
    return [f"handle{i}" for i in range(4)]


def amdsmi_get_gpu_enumeration_info(handle):
    index = int(handle[-1])
    return {"drm_card": index, "drm_render": 128 + index, "hsa_id": index + 1,
            "hip_id": index, "hip_uuid": f"GPU-{index:016x}"}


def amdsmi_get_energy_count(handle):
    return {"energy_accumulator": (int(handle[-1]) + 1) * 1_000_000,
            "counter_resolution": 1.0, "timestamp": 0}
'''


@pytest.fixture
def fake_amdsmi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    folder = tmp_path / "fake_amdsmi"
    folder.mkdir()
    (folder / "amdsmi.py").write_text(textwrap.dedent(FAKE_AMDSMI))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.setattr(cost, "_nvml_counter", lambda ids: None)  # an AMD node: no NVML
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    cost._amdsmi.cache_clear()
    yield cost._amdsmi()
    cost._amdsmi.cache_clear()
    sys.modules.pop("amdsmi", None)


@pytest.mark.parametrize(("rocr", "ray_ids", "joules"), [
    (None, ["2", "3"], 3 + 4),  # no ROCR list: HIP's ids are the node's
    ("2,3", ["0", "1"], 3 + 4),  # a job on GPUs 2 and 3: Ray's (HIP's) 0 and 1 are those
    ("2,3", ["1"], 4),
    ("GPU-0000000000000003,GPU-0000000000000001", ["0", "1"], 4 + 2),  # ROCR by UUID
])
def test_amd_energy_is_read_from_the_trials_own_gpus(
        fake_amdsmi: Any, monkeypatch: pytest.MonkeyPatch, rocr: str | None,
        ray_ids: list[str], joules: float) -> None:
    if rocr is not None:
        monkeypatch.setenv("ROCR_VISIBLE_DEVICES", rocr)
    counter = cost.gpu_energy_counter(ray_ids)
    assert counter is not None and counter() == pytest.approx(joules)


def test_amd_energy_without_enumeration_info_goes_by_position(
        fake_amdsmi: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """amdsmi before ROCm 6.4: indices by the handles' order; a UUID cannot be matched."""
    monkeypatch.delattr(fake_amdsmi, "amdsmi_get_gpu_enumeration_info")
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "2,3")
    counter = cost.gpu_energy_counter(["1"])
    assert counter is not None and counter() == pytest.approx(4)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "GPU-0000000000000003")
    assert cost.gpu_energy_counter(["0"]) is None  # not measured, rather than wrong


def test_no_amd_counter_for_a_gpu_the_node_lacks(fake_amdsmi: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "2,3")
    assert cost.gpu_energy_counter(["2"]) is None  # HIP id 2 of a 2-GPU list
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "GPU-00000000000000ff")
    assert cost.gpu_energy_counter(["0"]) is None


# Real runs.

def _spec(tmp_path: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "trainable": f"{HERE}:timed", "metric": "score", "mode": "max",
            "storage": str(tmp_path), "constants": {"steps": 4, "sleep": 0.5},
            "checkpoint": {"frequency": 1}, **extra}


def test_one_process_trials_report_cpu_hours_in_results_and_report(tmp_path: Path) -> None:
    result = hpo.run(_spec(tmp_path, "cpu", num_samples=2, resources={"cpus_per_trial": 2}),
                     num_cpus=4)
    for rows in trial_rows(result.path).values():
        assert len(rows) == 4
        for row in rows:  # metered from just before the function started
            assert row["cpu_hours"] * 3600 / 2 >= row["elapsed"]
            _check_hours(row, cpus=2, gpus=0, seconds=row["elapsed"])
            assert "energy_j" not in row  # no GPU: not measured, and not 0
    frame = load_results(result.path)
    assert {"cpu_hours", "gpu_hours"} <= set(frame.columns) and "energy_j" not in frame
    code, out, _ = cli_invoke(["results", str(result.path), "--format", "csv"])
    assert code == 0 and "cpu_hours" in out.splitlines()[0]
    page = build_report(result.path, tmp_path / "report.html").html.read_text()
    assert "cpu_hours" in page and "gpu_hours" in page


def test_a_restored_trial_goes_on_from_its_checkpoints_totals(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "restored", resources={"cpus_per_trial": 2},
                 failure={"max_failures": 1})
    spec["constants"].update(fail_at=3, marker_dir=str(tmp_path))
    result = hpo.run(spec, num_cpus=4)
    ((rows),) = trial_rows(result.path).values()
    assert [row["start"] for row in rows] == [1, 1, 3, 3]  # the retry began after step 2
    hours = [row["cpu_hours"] for row in rows]
    assert hours == sorted(hours)
    # The second run adds its own time to the totals of step 2's checkpoint.
    carried = rows[1]["cpu_hours"] * 3600 / 2
    assert carried >= 1.0  # two steps of 0.5 s: dropping it would fail the check below
    for row in rows[2:]:
        _check_hours(row, cpus=2, gpus=0, seconds=carried + row["elapsed"], slack=0.4)


def test_data_parallel_trial_counts_every_ranks_cpus_across_a_restore(tmp_path: Path) -> None:
    spec = {"name": "ddp", "trainable": f"{DP_TRAINABLES}:regression", "metric": "loss",
            "mode": "min", "storage": str(tmp_path), "failure": {"max_failures": 1},
            "distributed": {"backend": "ddp", "workers": 2, "cpus_per_worker": 1},
            "constants": {"epochs": 4, "kill_rank": 1, "kill_epoch": 2,
                          "marker_dir": str(tmp_path)}}
    result = hpo.run(spec, num_cpus=4)
    ((rows),) = trial_rows(result.path).values()
    assert [row["start"] for row in rows] == [0, 0, 2, 2]  # restored from epoch 1's checkpoint
    hours = [row["cpu_hours"] for row in rows]
    assert hours == sorted(hours) and hours[2] > hours[1]
    for row in rows:  # Ray's own clock, restored from the checkpoint too, started a little
        # later than the relay's meter, and skips the waits between its steps
        _check_hours(row, cpus=2, gpus=0, seconds=row["time_total_s"], slack=1.0)
        assert "energy_j" not in row


def _run_with_gpus(tmp_path: Path, fake: Path, name: str, resources: dict[str, Any],
                   **extra: Any) -> dict[str, list[dict[str, Any]]]:
    """`hpo run` in a process whose Ray has two (declared) GPUs and the fake pynvml."""
    space = tmp_path / f"{name}.yaml"
    space.write_text(yaml.safe_dump(_spec(tmp_path, name, resources=resources, **extra)))
    env = {"PYTHONPATH": os.pathsep.join([str(fake), str(ROOT), str(SUPPORT)]),
           "RAY_OVERRIDE_RESOURCES": json.dumps({"CPU": 4, "GPU": 2})}
    with pytest.MonkeyPatch.context() as patch:  # hpo_cli passes this process's environment
        for key, value in env.items():
            patch.setenv(key, value)
        done = hpo_cli("run", str(space))
    assert done.returncode == 0, done.stdout + done.stderr
    return trial_rows(tmp_path / name)


def test_energy_of_each_trials_own_whole_gpu(tmp_path: Path, fake_pynvml: Path) -> None:
    trials = _run_with_gpus(tmp_path, fake_pynvml, "whole", {"gpus_per_trial": 1},
                            num_samples=2, max_concurrent=2)
    assert sorted(rows[0]["gpu_ids"] for rows in trials.values()) == ["0", "1"]
    for rows in trials.values():
        for row in rows:
            _check_hours(row, cpus=1, gpus=1, seconds=row["elapsed"])
            watts = (int(row["gpu_ids"]) + 1) * 100  # the fake's draw of that device
            # the meter and the clock are read one after the other: on a busy machine a
            # scheduling gap lies between them (0.03 s seen), never a device's whole draw
            assert row["energy_j"] == pytest.approx(watts * row["gpu_hours"] * 3600,
                                                    rel=0.02, abs=watts * 0.1)
            # read at the start and at each report only: never in between
            assert row["nvml_reads"] == row["training_iteration"] + 1


def test_energy_is_absent_for_a_fractional_gpu(tmp_path: Path, fake_pynvml: Path) -> None:
    trials = _run_with_gpus(tmp_path, fake_pynvml, "half", {"gpus_per_trial": 0.5})
    for rows in trials.values():
        for row in rows:
            _check_hours(row, cpus=1, gpus=0.5, seconds=row["elapsed"])
            assert "energy_j" not in row  # a shared GPU's draw cannot be split among trials
