"""The `slurm:` section of an experiment YAML (also the keys of a site config file).

Site defaults (partition, account, modules, environment activation, network interface) can
sit in a small YAML file passed with `--site`; the experiment's own `slurm:` keys override
them, and command-line options override both.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
from hpo.spec._yaml import parse_yaml

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
    sbatch: list[str] = Field(default_factory=list)  # extra options, e.g. "--qos=normal"

    @model_validator(mode="after")
    def _consistent(self) -> SlurmSettings:
        try:
            limit = time_seconds(self.time)
        except ValueError:
            raise FieldProblem("time", f"not a Slurm time limit: {self.time!r}",
                               "write HH:MM:SS or D-HH:MM:SS, e.g. 02:00:00") from None
        if self.requeue and self.signal_seconds >= limit:
            raise FieldProblem("signal_seconds", f"must be shorter than time ({limit} s), got "
                               f"{self.signal_seconds}", "lower signal_seconds or raise time")
        for option in self.sbatch:
            if not option.startswith("-") or "\n" in option:
                raise FieldProblem("sbatch", f"not an sbatch option: {option!r}",
                                   "write options as on the command line, e.g. --qos=normal")
        return self


def merged_settings(spec_slurm: SlurmSettings, site: Path | None,
                    options: dict[str, Any], source: str) -> SlurmSettings:
    """Site file < the YAML's `slurm:` keys < command-line options (unset ones skipped)."""
    data: dict[str, Any] = {}
    if site is not None:
        try:
            raw = parse_yaml(site.read_text(), str(site))
        except OSError as exc:
            raise ConfigError(str(site), "", f"cannot read the site file ({exc.strerror})",
                              "check the --site path") from None
        if not isinstance(raw, dict):
            raise ConfigError(str(site), "", "expected slurm keys (key: value)",
                              "e.g. partition: booster")
        data.update(_validated(raw, str(site)).model_dump(exclude_unset=True))
    data.update(spec_slurm.model_dump(exclude_unset=True))
    given = {k: v for k, v in options.items() if v is not None}
    data.update(given)
    return _validated(data, source, prefix="slurm", options=set(given))


def _validated(data: dict[str, Any], source: str, prefix: str = "",
               options: set[str] = frozenset()) -> SlurmSettings:  # type: ignore[assignment]
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
