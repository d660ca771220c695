"""Reading a Slurm allocation from SLURM_* variables: pure functions, string in, value out.

One table maps what hpo needs to the variables Slurm sets (as submitit does); hostlists are
expanded here (`node[01-03,07]` -> node01, node02, node03, node07) instead of calling
`scontrol show hostnames`, so the parsing is testable without Slurm.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from hpo.errors import SlurmEnvironmentError

#: logical name -> the Slurm variables that carry it, first one set wins.
VARIABLES: dict[str, tuple[str, ...]] = {
    "job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
    "nodelist": ("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
    "num_nodes": ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
    "node_name": ("SLURMD_NODENAME",),
    "cpus_on_node": ("SLURM_CPUS_ON_NODE",),
    "cpus_per_node": ("SLURM_JOB_CPUS_PER_NODE",),  # '4(x2),2': in nodelist order
    # Slurm's ids (STEP first: a step on another node inherits the batch node's JOB_GPUS)
    "gpus": ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"),
    "gpu_count": ("SLURM_GPUS_ON_NODE",),  # count-only GRES (gres.conf without File=)
    "restart_count": ("SLURM_RESTART_COUNT",),
    "end_time": ("SLURM_JOB_END_TIME",),  # epoch seconds; Slurm 22.05 may not set it
}

_NOT_IN_JOB_HINT = ("run it inside an allocation: `hpo slurm submit SPACE.yaml` (or sbatch the "
                    "script from `hpo slurm render`)")


def lookup(env: Mapping[str, str], name: str) -> str | None:
    """The value of a logical name from the first of its variables that is set (non-empty)."""
    for var in VARIABLES[name]:
        value = env.get(var, "").strip()
        if value:
            return value
    return None


def job_end_time(env: Mapping[str, str]) -> float | None:
    """The allocation's end from SLURM_JOB_END_TIME; None when unset or unreadable."""
    value = lookup(env, "end_time") or ""
    return float(value) if value.isdigit() and int(value) > 0 else None


def restart_count(env: Mapping[str, str]) -> int:
    """How often Slurm requeued this job (0 outside Slurm)."""
    value = lookup(env, "restart_count") or "0"
    return int(value) if value.isdigit() else 0


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets: 'a[1-2],b' -> ['a[1-2]', 'b']."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError(f"unbalanced brackets in {text!r}")
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced brackets in {text!r}")
    parts.append(text[start:])
    return [p for p in parts if p]


def _expand_range(item: str) -> list[str]:
    low, sep, high = item.partition("-")
    if not sep:
        return [low]
    if not (low.isdigit() and high.isdigit()) or int(high) < int(low):
        raise ValueError(f"bad range {item!r}")
    width = len(low)  # node[01-03] keeps its zero padding
    return [str(n).zfill(width) for n in range(int(low), int(high) + 1)]


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a Slurm hostlist, e.g. 'node[01-03,07],gpu5' -> node01..node03, node07, gpu5.

    Example:
        >>> expand_hostlist("jwb[0001-0002]")
        ['jwb0001', 'jwb0002']
    """
    hosts: list[str] = []
    for part in _split_top(hostlist.strip()):
        match = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part)
        if match is None:
            if "[" in part or "]" in part:
                raise ValueError(f"cannot read {part!r}")
            hosts.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            hosts += [f"{prefix}{n}{suffix}" for n in _expand_range(item.strip())]
    return hosts


def parse_gpus(value: str | None) -> list[str]:
    """GPU ids from SLURM_*_GPUS / CUDA_VISIBLE_DEVICES ('0,1', '', 'NoDevFiles', 'N/A')."""
    if value is None or value.strip() in ("", "NoDevFiles", "N/A", "none"):
        return []
    return [g.strip() for g in value.split(",") if g.strip()]


def node_gpus(env: Mapping[str, str]) -> list[str]:
    """The ids CUDA should use for this node's share: Slurm's list (SLURM_STEP_GPUS), or
    CUDA_VISIBLE_DEVICES where it is Slurm's renumbering of that list under cgroups (0..n-1);
    else CUDA's, else 0..n-1 from a count-only GRES. Another CUDA_VISIBLE_DEVICES may be a
    stale copy (srun passes the submitting shell's on), so Slurm's list wins."""
    slurm = parse_gpus(lookup(env, "gpus"))
    cuda = parse_gpus(env.get("CUDA_VISIBLE_DEVICES"))
    if slurm:
        renumbered = cuda == [str(i) for i in range(len(slurm))]
        return cuda if renumbered else slurm
    if cuda:
        return cuda
    count = lookup(env, "gpu_count") or ""
    return [str(i) for i in range(int(count))] if count.isdigit() else []


def parse_cpus(value: str | None) -> int | None:
    """CPUs from SLURM_CPUS_ON_NODE; heterogeneous forms like '8(x2)' give the first count."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+)(\(x\d+\))?\s*", value)
    if match is None or int(match.group(1)) < 1:
        raise SlurmEnvironmentError(f"SLURM_CPUS_ON_NODE={value!r} is not a CPU count. Hint: "
                                    "request CPUs with --cpus-per-task")
    return int(match.group(1))


def expand_counts(value: str) -> list[int]:
    """Slurm's run-length counts, e.g. SLURM_JOB_CPUS_PER_NODE '4(x2),2' -> [4, 4, 2];
    ValueError if unreadable."""
    counts: list[int] = []
    for part in value.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            raise ValueError(f"cannot read {value!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def usable_cpus() -> int | None:
    """The CPUs this process may run on (its affinity mask, which Slurm's CPU binding sets);
    None where the platform cannot tell."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    return len(getaffinity(0)) if getaffinity is not None else None


def usable_cores() -> int:
    """The CPUs this process may run on; where the platform cannot tell (no affinity mask on
    macOS), the machine's."""
    return usable_cpus() or os.cpu_count() or 1


@dataclass(frozen=True)
class Allocation:
    """The parts of a Slurm job hpo uses to start Ray on it."""

    job_id: str
    nodes: tuple[str, ...]
    restart_count: int = 0
    cpus: tuple[int, ...] = ()  # the job's CPUs on each node; () where Slurm did not say

    @property
    def head(self) -> str:
        """The first node of SLURM_JOB_NODELIST: the Ray head (and where the script runs)."""
        return self.nodes[0]

    def cpus_on(self, node: str) -> int | None:
        """The job's CPUs on `node`: what each srun step there asks for again (srun does not
        inherit sbatch's --cpus-per-task since Slurm 22.05; on a site that binds steps to
        their CPUs, a step without it runs on one core)."""
        return self.cpus[self.nodes.index(node)] if self.cpus else None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Allocation:
        job_id, nodelist = lookup(env, "job_id"), lookup(env, "nodelist")
        if job_id is None or nodelist is None:
            raise SlurmEnvironmentError("not inside a Slurm job (SLURM_JOB_ID / SLURM_JOB_"
                                        f"NODELIST are not set). Hint: {_NOT_IN_JOB_HINT}")
        try:
            nodes = expand_hostlist(nodelist)
        except ValueError as exc:
            raise SlurmEnvironmentError(f"SLURM_JOB_NODELIST={nodelist!r}: {exc}. Hint: this is "
                                        "Slurm's own variable; do not set it by hand") from None
        count = lookup(env, "num_nodes")
        if count is not None and count.isdigit() and int(count) != len(nodes):
            raise SlurmEnvironmentError(f"SLURM_JOB_NUM_NODES={count} but SLURM_JOB_NODELIST="
                                        f"{nodelist!r} names {len(nodes)} node(s). Hint: do not "
                                        "set SLURM_* variables by hand")
        return cls(job_id, tuple(nodes), restart_count(env), _cpus_per_node(env, len(nodes)))


def _cpus_per_node(env: Mapping[str, str], nodes: int) -> tuple[int, ...]:
    try:
        counts = expand_counts(lookup(env, "cpus_per_node") or "")
    except ValueError:
        return ()  # unset or unreadable: steps ask for no CPU count, as before
    return tuple(counts) if len(counts) == nodes else ()


def _job_cpus_on(env: Mapping[str, str], node: str) -> int | None:
    """The job's CPUs on `node`: SLURM_JOB_CPUS_PER_NODE's entry for it (inside a step,
    SLURM_CPUS_ON_NODE counts the step's own), else SLURM_CPUS_ON_NODE."""
    with contextlib.suppress(SlurmEnvironmentError, ValueError):
        alloc = Allocation.from_env(env)
        if node in alloc.nodes and alloc.cpus:
            return alloc.cpus_on(node)
    return parse_cpus(lookup(env, "cpus_on_node"))


@dataclass(frozen=True)
class NodeShare:
    """What this job may use on the node a process runs on (read inside an srun step)."""

    name: str
    cpus: int | None  # what Ray is told; None: let Ray count them
    gpus: tuple[str, ...]
    job_cpus: int | None = None  # the job's CPUs on this node (SLURM_CPUS_ON_NODE)

    @classmethod
    def from_env(cls, env: Mapping[str, str], hostname: str,
                 usable: int | None = None) -> NodeShare:
        """`usable`: the CPUs this step may run on (usable_cpus()). Ray gets no more than
        that, whatever the job holds: a trial beyond the mask would only share its cores."""
        name = lookup(env, "node_name") or hostname.split(".")[0]
        job_cpus = _job_cpus_on(env, name)
        cpus = job_cpus if usable is None or job_cpus is None else min(job_cpus, usable)
        return cls(name, cpus, tuple(node_gpus(env)), job_cpus)

    @property
    def short_of_cpus(self) -> str | None:
        """One line when this step may use fewer CPUs than the job holds on the node."""
        if self.cpus is None or self.job_cpus is None or self.cpus >= self.job_cpus:
            return None
        return (f"{self.name}: this step may run on {self.cpus} CPU(s) (its affinity mask) but "
                f"the job holds {self.job_cpus} there; Ray uses {self.cpus}. Hint: start the "
                f"step with srun -c {self.job_cpus} (srun does not inherit sbatch's "
                "--cpus-per-task)")


def rocm_visible(env: Mapping[str, str]) -> dict[str, str]:
    """env with HIP_VISIBLE_DEVICES added where Slurm set only ROCR_VISIBLE_DEVICES (LUMI):
    Ray 2.60 refuses to start on AMD GPUs then. HIP ids index into ROCR's list, so HIP gets
    0..n-1 (every GPU ROCR leaves visible), never a copy of ROCR's ids."""
    out = dict(env)
    if "ROCR_VISIBLE_DEVICES" in out and "HIP_VISIBLE_DEVICES" not in out:
        rocr = parse_gpus(out["ROCR_VISIBLE_DEVICES"])
        out["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(rocr)))
    return out


def ray_node_env(env: Mapping[str, str], gpus: tuple[str, ...], cache_dir: str) -> dict[str, str]:
    """The environment of a node's `ray start`: its GPUs as the ids Ray hands out (Ray gives
    each worker the entries of this list at its slots, NVIDIA via CUDA_VISIBLE_DEVICES, AMD
    via HIP_VISIBLE_DEVICES) and MIOpen's caches in the job's node-local cache_dir (a shared
    default is locked by other jobs), unless set."""
    out = rocm_visible(env)
    if gpus:
        out["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        if "HIP_VISIBLE_DEVICES" not in out:
            out["HIP_VISIBLE_DEVICES"] = out["CUDA_VISIBLE_DEVICES"]
    for name in ("MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR"):
        out.setdefault(name, cache_dir)
    return out
