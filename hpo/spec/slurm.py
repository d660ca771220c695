"""The `slurm:` section of an experiment YAML (also the keys of a site profile).

Site defaults (partition, account, modules, environment, network) come from a built-in
profile (`--site lumi-g`) or a small YAML file (`--site FILE`, which may name a built-in as its
`base:`); the experiment's own `slurm:` keys override them, command-line options override all.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from hpo.errors import ConfigError
from hpo.spec._validation import FieldProblem, Strict, config_error
from hpo.spec.container import ContainerSettings
from hpo.spec.site import site_layers

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_HOST_SUFFIX = re.compile(r"^[A-Za-z0-9-]*$")
# Slurm's memory sizes: a whole number, megabytes unless K, M, G or T follows ("0": all of it)
_MEMORY = re.compile(r"^\d+[KMGT]?$")
# Rendered as export NAME="VALUE": $VARS expand, nothing else may leave the quotes.
_ENV_UNSAFE = ('"', "\\", "`", "\n")

# Slurm's --time forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def time_seconds(value: str) -> int:
    """Seconds in a Slurm time limit, e.g. '1-02:00:00' -> 93600; ValueError if unreadable."""
    match = _TIME.match(value.strip())
    if match is None:
        raise ValueError(value)
    days, first, second, third = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        parts = [int(first), int(second or 0), int(third or 0)]
        return int(days) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    if third is not None:  # HH:MM:SS
        return int(first) * 3600 + int(second) * 60 + int(third)
    return int(first) * 60 + int(second or 0)  # MM[:SS]


def _check_memory(field: str, value: str | None) -> None:
    if value is not None and not _MEMORY.match(value):
        raise FieldProblem(field, f"not a Slurm memory size: {value!r}",
                           "write a whole number with K, M, G or T, e.g. 60G (0: all of it)")


class PartitionLimits(Strict):
    """What a site's partition enforces (site profiles), checked at render, and the memory
    the site asks jobs there to request (asked for unless the job names its own)."""

    max_time: str | None = None  # the partition's MaxTime: a longer job is refused
    whole_nodes: bool = False  # every node is billed whole, whatever the job asks for
    mem: str | None = None  # --mem=SIZE asked for here, unless slurm.mem(_per_gpu) is set
    mem_per_gpu: str | None = None  # --mem-per-gpu=SIZE (GPU jobs), likewise

    @model_validator(mode="after")
    def _readable(self) -> PartitionLimits:
        if self.max_time is not None:
            try:
                time_seconds(self.max_time)
            except ValueError:
                raise FieldProblem("max_time", f"not a Slurm time limit: {self.max_time!r}",
                                   "write HH:MM:SS or D-HH:MM:SS, e.g. 2-00:00:00") from None
        _check_memory("mem", self.mem)
        _check_memory("mem_per_gpu", self.mem_per_gpu)
        if self.mem is not None and self.mem_per_gpu is not None:
            raise FieldProblem("mem_per_gpu", "mem and mem_per_gpu are both set (Slurm takes "
                               "one)", "keep one of them")
        return self


class SlurmSettings(Strict):
    """How `hpo slurm render/submit` asks for an allocation and starts Ray inside it."""

    nodes: PositiveInt = 1
    cpus_per_node: PositiveInt | None = None  # None: the partition's default
    gpus_per_node: NonNegativeInt = 0
    time: str = "01:00:00"
    partition: str | None = None
    account: str | None = None
    requeue: bool = True  # on the walltime warning: stop, requeue, resume
    signal_seconds: PositiveInt = 300  # USR1 this long before the time limit
    modules: list[str] = Field(default_factory=list)  # `module load` these
    setup: list[str] = Field(default_factory=list)  # shell lines run before hpo
    venv: str | None = None  # activated with `source VENV/bin/activate`
    workdir: str | None = None  # cd here first; default: where render ran
    interface: str | None = None  # Ray's network interface, e.g. ib0; default: hostname's
    dashboard: bool = False  # on the head, bound to 127.0.0.1 only
    startup_timeout_s: PositiveFloat = 180
    job_dir: str = "~/.hpo/jobs"  # per-job token and addresses (shared file system)
    mem: str | None = None  # e.g. 480G; unset: the partition's, if any
    mem_per_gpu: str | None = None  # e.g. 60G; unset: the partition's, if any
    sbatch: list[str] = Field(default_factory=list)  # extra options, e.g. "--qos=normal"
    # What one node of the machine has (site profiles): checked against, never asked for.
    node_gpus: NonNegativeInt | None = None  # 0: a CPU-only site
    node_cpus: PositiveInt | None = None  # scontrol show node's CPUTot: threads at JSC
    cpus_per_gpu: PositiveInt | None = None  # --cpus-per-task when cpus_per_node is unset
    gpu_option: Literal["gpus-per-node", "gres"] = "gpus-per-node"  # or --gres=gpu:N
    gpu_vendor: Literal["nvidia", "amd"] | None = None
    hostname_suffix: str = ""  # Ray's address: this host's name + suffix (JSC: i, InfiniBand)
    env: dict[str, str] = Field(default_factory=dict)  # exported in the job (merged by name)
    # The CPUs near each GPU, GPU 0's first, as OS CPU lists ("49-55"); unset: gres.conf's
    # Cores= for the node, if any. Trials and ranks run on the CPUs near their GPU.
    gpu_cores: list[str] = Field(default_factory=list)
    # The site's partitions by name (merged by name): their time limits and billing.
    partitions: dict[str, PartitionLimits] = Field(default_factory=dict)
    # Every Python process of the job (hpo, Ray, the trials) in this image; srun stays outside
    container: ContainerSettings = Field(default_factory=ContainerSettings)
    # File systems with a file-count quota, by path prefix: a venv there warns at render
    file_quotas: dict[str, PositiveInt] = Field(default_factory=dict)

    @property
    def cpus_per_task(self) -> int | None:
        """The one task per node's CPUs: cpus_per_node, else cpus_per_gpu x gpus_per_node."""
        if self.cpus_per_node is not None:
            return self.cpus_per_node
        if self.cpus_per_gpu is not None and self.gpus_per_node:
            return self.cpus_per_gpu * self.gpus_per_node
        return None

    @property
    def memory_option(self) -> str | None:
        """The memory to ask for: slurm.mem or mem_per_gpu, else the partition's (its
        mem_per_gpu only when the job asks for GPUs)."""
        if self.mem is not None:
            return f"--mem={self.mem}"
        if self.mem_per_gpu is not None:
            return f"--mem-per-gpu={self.mem_per_gpu}"
        if self.limits.mem is not None:
            return f"--mem={self.limits.mem}"
        if self.limits.mem_per_gpu is not None and self.gpus_per_node:
            return f"--mem-per-gpu={self.limits.mem_per_gpu}"
        return None

    @property
    def limits(self) -> PartitionLimits:
        """The chosen partition's limits as the site knows them (none if unknown)."""
        return self.partitions.get(self.partition or "", PartitionLimits())

    def billing_warning(self) -> str | None:
        """One line when the partition bills whole nodes and the job asks for less."""
        if not self.limits.whole_nodes or self.node_gpus is None:
            return None
        if self.gpus_per_node >= self.node_gpus:
            return None
        return (f"partition {self.partition} bills whole nodes: {self.gpus_per_node} of "
                f"{self.node_gpus} GPUs per node are asked for, {self.node_gpus} are paid for. "
                f"Hint: --gpus-per-node {self.node_gpus}, or a partition that shares nodes")

    @model_validator(mode="before")
    @classmethod
    def _node_cpus_not_cores(cls, data: Any) -> Any:
        if isinstance(data, dict) and "node_cores" in data:
            raise FieldProblem("node_cores", f"unknown key 'node_cores' (got "
                               f"{data['node_cores']!r})", "write node_cpus: the node's CPUs "
                               "as Slurm counts them (scontrol show node, CPUTot; hardware "
                               "threads where SMT is on, as at JSC)")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> SlurmSettings:
        self._check_time()
        for option in self.sbatch:
            if not option.startswith("-") or "\n" in option:
                raise FieldProblem("sbatch", f"not an sbatch option: {option!r}",
                                   "write options as on the command line, e.g. --qos=normal")
        self._check_node_fits()
        if not _HOST_SUFFIX.match(self.hostname_suffix):
            raise FieldProblem("hostname_suffix", f"not a hostname suffix: "
                               f"{self.hostname_suffix!r}", "letters, digits and - only, e.g. i")
        self._check_env()
        self._check_gpu_cores()
        self._check_memory()
        return self

    def _check_memory(self) -> None:
        _check_memory("mem", self.mem)
        _check_memory("mem_per_gpu", self.mem_per_gpu)
        if self.mem is not None and self.mem_per_gpu is not None:
            raise FieldProblem("mem_per_gpu", f"mem ({self.mem}) and mem_per_gpu "
                               f"({self.mem_per_gpu}) are both set (Slurm takes one)",
                               "keep one of them")

    def _check_gpu_cores(self) -> None:
        for i, cpus in enumerate(self.gpu_cores):
            if not _CPU_LIST.match(cpus):
                raise FieldProblem(f"gpu_cores.{i}", f"not a CPU list: {cpus!r}",
                                   "write CPU ids and ranges, e.g. 49-55 or 0-5,48-53")
        if self.node_gpus is not None and len(self.gpu_cores) > self.node_gpus:
            raise FieldProblem("gpu_cores", f"names {len(self.gpu_cores)} GPUs but node_gpus "
                               f"is {self.node_gpus}", "one CPU list per GPU of a node")

    def _check_env(self) -> None:
        for name, value in self.env.items():
            if not _ENV_NAME.match(name):
                raise FieldProblem(f"env.{name}", f"not an environment variable name: {name!r}",
                                   "letters, digits and _, not starting with a digit")
            if any(c in value for c in _ENV_UNSAFE):
                raise FieldProblem(f"env.{name}", f"cannot be exported as written: {value!r}",
                                   "leave out quotes, backslashes, backticks and newlines "
                                   "($VARIABLES are fine)")

    def _check_time(self) -> None:
        try:
            limit = time_seconds(self.time)
        except ValueError:
            raise FieldProblem("time", f"not a Slurm time limit: {self.time!r}",
                               "write HH:MM:SS or D-HH:MM:SS, e.g. 02:00:00") from None
        allowed = self.limits.max_time
        if allowed is not None and limit > time_seconds(allowed):
            raise FieldProblem("time", f"{self.time} is over partition {self.partition}'s "
                               f"limit of {allowed}", f"ask for at most {allowed}: with "
                               "requeue on, the job goes on in a requeued run")
        if self.requeue and self.signal_seconds >= limit:
            raise FieldProblem("signal_seconds", f"must be shorter than time ({limit} s), got "
                               f"{self.signal_seconds}", "lower signal_seconds or raise time")

    def _check_node_fits(self) -> None:
        """Asking for more GPUs or cores than a node has would wait in the queue forever."""
        if self.node_gpus is not None and self.gpus_per_node > self.node_gpus:
            raise FieldProblem("gpus_per_node", f"must be <= node_gpus ({self.node_gpus}), "
                               f"got {self.gpus_per_node}",
                               "lower gpus_per_node, or raise node_gpus if your nodes have more")
        cpus = self.cpus_per_task
        if self.node_cpus is not None and cpus is not None and cpus > self.node_cpus:
            field = "cpus_per_node" if self.cpus_per_node is not None else "cpus_per_gpu"
            raise FieldProblem(field, f"asks {cpus} CPUs per node but node_cpus is "
                               f"{self.node_cpus}", f"lower {field} (CPUs as Slurm counts "
                               "them: scontrol show node, CPUTot)")


def merged_settings(spec_slurm: SlurmSettings, site: str | Path | None,
                    options: dict[str, Any], source: str) -> SlurmSettings:
    """Built-in base < site file < the YAML's `slurm:` keys < command-line options (unset
    ones skipped). `env`, `partitions` and `file_quotas` merge by name, so adding one keeps
    the site's others; `container` merges by key (its `env` by name)."""
    data: dict[str, Any] = {}
    for layer_source, raw in site_layers(site) if site is not None else []:
        _merge(data, _validated(raw, layer_source).model_dump(exclude_unset=True))
    _merge(data, spec_slurm.model_dump(exclude_unset=True))
    given = {k: v for k, v in options.items() if v is not None}
    _merge(data, given)
    settings = _validated(data, source, prefix="slurm", options=set(given))
    # Only the merged settings know the job's GPUs (a layer may leave them to another).
    if settings.mem_per_gpu is not None and not settings.gpus_per_node:
        raise ConfigError(source, "slurm.mem_per_gpu", f"{settings.mem_per_gpu} per GPU, but "
                          "the job asks for no GPUs", "set slurm.mem instead, or gpus_per_node")
    return settings


def _merge(data: dict[str, Any], layer: dict[str, Any]) -> None:
    for key, value in layer.items():
        if key == "container":  # by key, and its env by name
            merged = {**data.get(key, {}), **value}
            merged["env"] = {**data.get(key, {}).get("env", {}), **value.get("env", {})}
            data[key] = merged
            continue
        merged_by_name = key in ("env", "partitions", "file_quotas")
        data[key] = {**data.get(key, {}), **value} if merged_by_name else value


def _validated(data: dict[str, Any], source: str, prefix: str = "",
               options: set[str] | frozenset[str] = frozenset()) -> SlurmSettings:
    try:
        return SlurmSettings.model_validate(data)
    except ValidationError as exc:
        error = config_error(source, exc)
        key = error.path.split(".")[0]
        if key in options:  # the bad value came from the command line: name the option
            path = "--" + key.replace("_", "-")
        else:
            path = f"{prefix}.{error.path}" if prefix and error.path else error.path or prefix
        raise ConfigError(source, path, error.message, error.hint) from None
