"""What a trial costs, added to every result it reports through `hpo.report`: `cpu_hours` and
`gpu_hours` (wall time x the CPUs and GPUs of the trial's placement group; a fractional GPU
counts its fraction, as it is billed) and `energy_j`, the joules its own whole GPUs drew, where
the device counts them (NVIDIA through nvidia-ml-py, AMD through amdsmi).

Each run of a trial (from its start or restore to its end, pause or failure) adds its own wall
time x its own resources, so a trial whose resources change between runs is integrated right.
The running totals travel in the metadata of each checkpoint hpo writes: a trial restored from a
checkpoint goes on from the totals of that checkpoint. Energy is absent, never 0, when any run
of the trial could not measure it (no library or device, a fractional or MIG GPU, or GPUs held
by other processes: the ranks of a data-parallel trial). Each result also carries
`report_time`, when it was reported (UNIX seconds, not rounded as Ray's `timestamp` is).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any

from hpo.ray_adapters import train_session

# When the trial reported, as UNIX seconds to the microsecond (Ray's `timestamp` is whole
# seconds): the report's wall-time figures place each report by it.
REPORT_TIME = "report_time"
_RECORD = "hpo_cost"  # the key in a checkpoint's metadata (Ray's .metadata.json)
EnergyCounter = Callable[[], float]  # joules drawn by the trial's GPUs since some fixed point


@dataclass(frozen=True)
class Totals:
    """A trial's cost so far; energy_j None: not measured (in this run or an earlier one)."""

    cpu_hours: float = 0.0
    gpu_hours: float = 0.0
    energy_j: float | None = 0.0

    def metrics(self) -> dict[str, float]:
        found = {"cpu_hours": self.cpu_hours, "gpu_hours": self.gpu_hours}
        if self.energy_j is not None:
            found["energy_j"] = self.energy_j
        return found

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | None) -> Totals:
        """The totals a checkpoint carries (a checkpoint without them: zero, energy unknown)."""
        if not record:
            return cls(energy_j=None)
        energy = record.get("energy_j")
        return cls(float(record.get("cpu_hours", 0.0)), float(record.get("gpu_hours", 0.0)),
                   None if energy is None else float(energy))


class Meter:
    """One run of a trial: its resources, when it started, and what earlier runs cost."""

    def __init__(self, cpus: float, gpus: float, carried: Totals, started: float,
                 energy: EnergyCounter | None = None) -> None:
        self.cpus, self.gpus, self.carried, self.started = cpus, gpus, carried, started
        self._energy = energy if carried.energy_j is not None else None
        self._energy_start = _read(energy) if self._energy is not None else None

    def totals(self, now: float | None = None) -> Totals:
        hours = ((time.monotonic() if now is None else now) - self.started) / 3600
        return Totals(self.carried.cpu_hours + self.cpus * hours,
                      self.carried.gpu_hours + self.gpus * hours, self._joules())

    def _joules(self) -> float | None:
        reading = _read(self._energy) if self._energy is not None else None
        if reading is None or self._energy_start is None or self.carried.energy_j is None:
            return None
        return self.carried.energy_j + reading - self._energy_start


def _read(counter: EnergyCounter | None) -> float | None:
    """A counter's reading; None when the device refuses (cost never fails a trial)."""
    try:
        return counter() if counter is not None else None
    except Exception:  # each vendor library raises its own error types
        return None


_meter: ContextVar[Meter | None] = ContextVar("hpo_cost_meter", default=None)


@contextlib.contextmanager
def metered() -> Iterator[None]:
    """Meter this run of the trial (one-process trials: around the user's function, so the
    energy counters are read at its start)."""
    meter = _start(time.monotonic(), energy=True)
    token = _meter.set(meter)
    try:
        yield
    finally:
        _meter.reset(token)


def current() -> Totals | None:
    """The trial's totals now (None outside a Tune trial). Without `metered` around the run (a
    data-parallel trial's relay), the run is taken to start where Ray's session started or last
    reported, and energy is not measured."""
    meter = _meter.get()
    if meter is None:
        reported = train_session.last_report_time()
        if reported is None:
            return None
        since = max(0.0, time.time() - reported)
        meter = _start(time.monotonic() - since, energy=False)
        _meter.set(meter)  # this thread runs this trial run only: Tune starts one per run
    return meter.totals() if meter is not None else None


def added(metrics: Mapping[str, Any], totals: Totals | None,
          now: float | None = None) -> dict[str, Any]:
    """metrics with the cost keys and REPORT_TIME added, inside a trial (a key the trainable
    reported itself is kept)."""
    if totals is None:
        return dict(metrics)
    return {**totals.metrics(), REPORT_TIME: time.time() if now is None else now, **metrics}


def record(checkpoint: Any, totals: Totals | None) -> None:
    """Keep the totals in the checkpoint's metadata (a tune.Checkpoint), for a restored run."""
    if totals is not None:
        checkpoint.update_metadata({_RECORD: asdict(totals)})


def _start(started: float, energy: bool) -> Meter | None:
    from ray import tune

    try:
        bundles = tune.get_context().get_trial_resources().bundles
    except (RuntimeError, AttributeError):  # not in a Tune trial (a Ray Train worker, ...)
        return None
    cpus = sum(float(bundle.get("CPU", 0)) for bundle in bundles)
    gpus = sum(float(bundle.get("GPU", 0)) for bundle in bundles)
    whole = all(float(b.get("GPU", 0)).is_integer() for b in bundles) and gpus >= 1
    counter = gpu_energy_counter(_own_gpus(gpus)) if energy and whole else None
    return Meter(cpus, gpus, _carried(), started, counter)


def _carried() -> Totals:
    from ray import tune

    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return Totals()
    try:  # one small file, not the checkpoint
        return Totals.from_record(checkpoint.get_metadata().get(_RECORD))
    except (OSError, ValueError):
        return Totals(energy_j=None)


def _own_gpus(gpus: float) -> list[str] | None:
    """The physical ids of this process's GPUs when it holds all of the trial's (Ray gives
    the ids of the node's CUDA_VISIBLE_DEVICES, or the indices when that was unset)."""
    import ray

    ids = sorted(str(i) for i in ray.get_gpu_ids())
    return ids if len(ids) == gpus else None  # the relay of a data-parallel trial holds none


def gpu_energy_counter(ids: list[str] | None) -> EnergyCounter | None:
    """Joules drawn by these GPUs, from NVML or amdsmi; None when neither can count them."""
    if not ids or any(not (i.isdigit() or i.startswith("GPU-")) for i in ids):
        return None  # MIG slices (MIG-...) have no energy counter of their own
    for opener in (_nvml_counter, _amdsmi_counter):
        try:
            counter = opener(ids)
        except Exception:  # library missing, no driver, or an unsupported device
            continue
        if counter is not None:
            return counter
    return None


@functools.cache
def _nvml() -> Any:
    """pynvml, initialised once per process (the process ends with the trial's actor)."""
    import pynvml  # nvidia-ml-py (hpo[gpu])

    pynvml.nvmlInit()
    return pynvml


@functools.cache
def _amdsmi() -> Any:
    import amdsmi  # needs ROCm's libamd_smi on the node

    amdsmi.amdsmi_init()
    return amdsmi


def _nvml_counter(ids: list[str]) -> EnergyCounter | None:
    pynvml = _nvml()
    handles = [pynvml.nvmlDeviceGetHandleByUUID(i) if i.startswith("GPU-")
               else pynvml.nvmlDeviceGetHandleByIndex(int(i)) for i in ids]

    def joules() -> float:  # NVML counts millijoules since the driver was loaded
        return sum(pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles) / 1000

    joules()  # fails here, at the start, on a device without the counter
    return joules


def _amdsmi_counter(ids: list[str]) -> EnergyCounter | None:
    amdsmi = _amdsmi()
    handles = _amd_handles(amdsmi, node_gpu_ids(ids, os.environ.get("ROCR_VISIBLE_DEVICES")))
    if handles is None:
        return None

    def joules() -> float:  # an accumulator x its resolution in microjoules
        total = 0.0
        for handle in handles:
            count = amdsmi.amdsmi_get_energy_count(handle)
            accumulated = count.get("energy_accumulator", count.get("power", math.nan))
            total += accumulated * count["counter_resolution"] / 1e6
        return total

    if math.isnan(joules()):
        return None
    return joules


def node_gpu_ids(ids: list[str], rocr: str | None) -> list[str]:
    """The trial's AMD GPUs as the node numbers them (indices, or UUIDs GPU-...). Ray's ids are
    HIP's, and HIP's index into ROCR_VISIBLE_DEVICES' list where the job sets it (Slurm on
    LUMI sets it alone; hpo.cluster.slurm_env gives HIP 0..n-1)."""
    visible = [part.strip() for part in (rocr or "").split(",") if part.strip()]
    return [visible[int(i)] for i in ids] if visible else list(ids)


def _amd_handles(amdsmi: Any, node_ids: list[str]) -> list[Any] | None:
    """amdsmi's handles of these GPUs (it sees every GPU of the node, whatever the job sees),
    matched by HIP's own index or UUID; None when one is not found."""
    handles = amdsmi.amdsmi_get_processor_handles()
    if not hasattr(amdsmi, "amdsmi_get_gpu_enumeration_info"):  # before ROCm 6.4: by position
        if not all(i.isdigit() and int(i) < len(handles) for i in node_ids):
            return None
        return [handles[int(i)] for i in node_ids]
    by_index, by_uuid = {}, {}
    for handle in handles:
        info = amdsmi.amdsmi_get_gpu_enumeration_info(handle)
        by_index[str(info["hip_id"])], by_uuid[_uuid(info["hip_uuid"])] = handle, handle
    found = [by_index.get(i) if i.isdigit() else by_uuid.get(_uuid(i)) for i in node_ids]
    return None if any(handle is None for handle in found) else found


def _uuid(text: str) -> str:
    return text.strip().lower().removeprefix("gpu-")
