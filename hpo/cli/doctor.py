"""`hpo doctor`: what this installation can do, checked by importing it, not by guessing."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import platform
from collections.abc import Callable

Row = tuple[str, str, bool]  # (what, finding, fine)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _packages() -> list[Row]:
    rows = [("python", platform.python_version(), True)]
    for package in ("ray", "torch", "optuna", "pytorch_optimizer"):
        version = _version(package)
        rows.append((package, version or "not installed", version is not None))
    return rows


def _ray_patches() -> list[Row]:
    """The Ray release against the tested range, and the gate's table: each of hpo's changes
    below Ray's public API, on or off and why (hpo.ray_adapters.gate)."""
    from hpo.ray_adapters import gate
    from hpo.ray_adapters.registry import NEWEST_RAY, OLDEST_RAY

    tested = OLDEST_RAY <= gate.ray_version() <= NEWEST_RAY
    rows = [("ray range", f"{gate.supported_ray()} "
             f"({'tested' if tested else 'untested: speed patches off'})", tested)]
    for name, kind, state, why in gate.table():
        # a fix or feature that does not apply is a finding; a speed patch off is only slower
        fine = state == "on" or kind == "speed" or why.startswith(gate.SWITCH)
        rows.append((f"patch {name}", f"{state:<3} {kind:<7} {why}", fine))
    return rows


def _torch() -> list[Row]:
    import torch

    nccl = torch.distributed.is_nccl_available()
    return [("torch.distributed", f"gloo{', nccl' if nccl else ''}  (backend: ddp)",
             torch.distributed.is_gloo_available())]


def _gpu() -> list[Row]:
    from hpo.cli.doctor_gpu import gpu_rows, probe_gpu

    return gpu_rows(probe_gpu())


def _horovod() -> list[Row]:
    try:
        hvd = importlib.import_module("horovod.torch")
    except ImportError as exc:
        return [("horovod", f"not usable ({exc}). Hint: hpo install horovod", False)]
    operations = [name for name, built in (("gloo", hvd.gloo_built()), ("nccl", hvd.nccl_built()),
                                           ("mpi", hvd.mpi_built())) if built]
    finding = f"{_version('horovod')}, operations built: {', '.join(operations) or 'none'}"
    return [("horovod", f"{finding}  (backend: horovod)", "gloo" in operations)]


def _horovod_ray() -> list[Row]:
    try:
        importlib.import_module("horovod.ray")
    except ImportError as exc:
        return [("horovod.ray", f"not usable ({exc})", False)]
    return [("horovod.ray", "RayExecutor importable", True)]


def _cluster(interface: str | None, site: str | None = None) -> list[Row]:
    """What `hpo slurm run` would choose on this node (job, nodes, address, ports, CPUs, GPUs),
    with the site profile's interface and hostname suffix when one is named; an address other
    nodes cannot reach, or a step bound to fewer CPUs than the job holds, is not fine."""
    from hpo.cluster.node_report import node_checks

    suffix = ""
    if site is not None:
        from hpo.spec.slurm import SlurmSettings, merged_settings

        settings = merged_settings(SlurmSettings(), site, {}, "--site")
        interface, suffix = interface or settings.interface, settings.hostname_suffix
    return node_checks(interface=interface, suffix=suffix)


def _site(site: str) -> list[Row]:
    """The site profile's modules in a clean login shell; RCCL's plugin on AMD GPUs."""
    from hpo.cli.doctor_site import site_rows

    return site_rows(site)


def diagnose(interface: str | None = None, site: str | None = None) -> list[Row]:
    """Every check's rows; a check that crashes is reported as a failed row, not raised."""
    checks: list[Callable[[], list[Row]]] = [
        _packages, _ray_patches, _torch, _gpu, _horovod, _horovod_ray,
        functools.partial(_cluster, interface, site)]
    if site is not None:
        checks.append(functools.partial(_site, site))
    rows: list[Row] = []
    for check in checks:
        try:
            rows.extend(check())
        except Exception as exc:  # a broken install must still get a report
            named = getattr(check, "func", check)  # a partial names its function
            name = str(getattr(named, "__name__", "check")).strip("_")
            rows.append((name, f"check failed: {exc}", False))
    return rows
