"""Which CPUs lie near each GPU of this node, as the site's layout says: the profile's
`gpu_cores` (OS CPU ids, as LUMI documents its GCD-to-CCD map), else gres.conf's `Cores=`
for this node (Slurm's logical core indices, turned into OS CPU ids through sysfs).

The node process hands the table to Ray's workers in HPO_GPU_CORES; each trial process, and
each rank, then runs on the CPUs near its own GPU (hpo.trial.placement).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from hpo.cluster.slurm_env import expand_hostlist
from hpo.trial.placement import GPU_CORES_VAR

__all__ = ["GPU_CORES_VAR", "node_gpu_cores", "table_text"]
_SYSFS = Path("/sys/devices/system/cpu")


def cpu_list(text: str) -> list[int]:
    """'0-2,8' -> [0, 1, 2, 8]; ValueError if unreadable."""
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return sorted(set(cpus))


def gres_cores(conf: str, node: str) -> dict[str, list[int]]:
    """GPU index (in gres.conf's order for `node`) -> its Cores= (Slurm logical indices);
    GPUs without Cores= are left out."""
    table: dict[str, list[int]] = {}
    index = 0
    for line in conf.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S+)", line.split("#", 1)[0]))
        if fields.get("Name") != "gpu" or "File" not in fields:
            continue
        if "NodeName" in fields and node not in expand_hostlist(fields["NodeName"]):
            continue
        for _ in expand_hostlist(fields["File"]):
            if "Cores" in fields:
                table[str(index)] = cpu_list(fields["Cores"])
            index += 1
    return table


def logical_cores(sysfs: Path = _SYSFS) -> list[list[int]]:
    """The OS CPUs of each core in Slurm's (hwloc's) logical order: by package, then core."""
    cores: dict[tuple[int, int], list[int]] = {}
    for cpu in sysfs.glob("cpu[0-9]*"):
        topology = cpu / "topology"
        if topology.is_dir():
            key = (int((topology / "physical_package_id").read_text()),
                   int((topology / "core_id").read_text()))
            cores.setdefault(key, []).append(int(cpu.name[3:]))
    return [sorted(cores[key]) for key in sorted(cores)]


def node_gpu_cores(profile: list[str], env: Mapping[str, str], node: str,
                   sysfs: Path = _SYSFS) -> dict[str, list[int]]:
    """GPU id -> OS CPUs near it: the profile's list (GPU 0's first) when it has one, else
    gres.conf's."""
    if profile:
        return {str(gpu): cpu_list(cpus) for gpu, cpus in enumerate(profile)}
    conf = Path(env.get("SLURM_CONF", "/etc/slurm/slurm.conf")).with_name("gres.conf")
    try:
        indices = gres_cores(conf.read_text(), node)
    except OSError:
        return {}
    cores = logical_cores(sysfs)
    return {gpu: sorted(cpu for i in found if i < len(cores) for cpu in cores[i])
            for gpu, found in indices.items()}


def table_text(table: Mapping[str, list[int]]) -> str:
    """The HPO_GPU_CORES value: '0=49,50,51;1=57,58'."""
    return ";".join(f"{gpu}={','.join(map(str, cpus))}" for gpu, cpus in table.items() if cpus)
