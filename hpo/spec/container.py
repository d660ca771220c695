"""The `slurm.container:` section: the image every Python process of a job runs in.

A site profile may hold the container's runtime, binds and variables without an image
(lumi-g: SingularityCE, `FI_MR_CACHE_MONITOR`); the experiment's `image:` turns it on.
Apptainer's documented form is `apptainer exec [exec options...] <container> <command>`
(https://apptainer.org/docs/user/main/cli/apptainer_exec.html).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from hpo.spec._validation import FieldProblem, Strict

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BIND_OPTIONS = {"ro", "rw"}
# Passed as one shell word each in the batch script and as argv in steps: nothing that a
# shell or Apptainer's comma-separated bind list would read differently.
_UNSAFE = re.compile(r"[\s,\"'`$\\;&|<>]")
# Apptainer's GPU options by the profile's gpu_vendor (apptainer exec --help: --nv, --rocm)
GPU_FLAGS = {"nvidia": "--nv", "amd": "--rocm"}


class ContainerSettings(Strict):
    """Where the job's Python runs: an Apptainer/Singularity image (off while image is unset)."""

    image: str | None = None  # a .sif file (or a sandbox folder), as on the compute nodes
    runtime: Literal["apptainer", "singularity"] = "apptainer"  # LUMI: singularity
    binds: list[str] = Field(default_factory=list)  # src[:dst[:ro|rw]], as -B takes them
    venv: str | None = None  # a venv made inside the image (--system-site-packages)
    env: dict[str, str] = Field(default_factory=dict)  # set inside the container only

    @property
    def enabled(self) -> bool:
        return self.image is not None

    @property
    def env_prefix(self) -> str:
        """What the runtime strips to set a variable inside: APPTAINERENV_NAME=VALUE."""
        return f"{self.runtime.upper()}ENV_"

    @property
    def python(self) -> str:
        """The interpreter inside: the venv's, else the image's python3."""
        return f"{self.venv.rstrip('/')}/bin/python" if self.venv else "python3"

    @model_validator(mode="after")
    def _readable(self) -> ContainerSettings:
        for key, value in (("image", self.image), ("venv", self.venv)):
            if value is not None and (not value.startswith("/") or _UNSAFE.search(value)):
                raise FieldProblem(key, f"not an absolute path hpo can pass on: {value!r}",
                                   "write the full path as the compute nodes see it, without "
                                   "spaces, commas, quotes or $VARIABLES")
        for i, bind in enumerate(self.binds):
            _check_bind(f"binds.{i}", bind)
        for name, value in self.env.items():
            if not _ENV_NAME.match(name) or any(c in value for c in '"\\`\n'):
                raise FieldProblem(f"env.{name}", f"cannot be exported as written: "
                                   f"{name}={value!r}", "a variable name, and a value without "
                                   "quotes, backslashes, backticks or newlines")
        return self


def _check_bind(field: str, bind: str) -> None:
    parts = bind.split(":")
    hint = ("write src[:dst[:ro|rw]] with absolute paths, one bind per entry, e.g. "
            "/scratch/project_465000000")
    if len(parts) > 3 or any(_UNSAFE.search(p) for p in parts):
        raise FieldProblem(field, f"not a bind: {bind!r}", hint)
    if not all(p.startswith("/") for p in parts[:2]):
        raise FieldProblem(field, f"not an absolute path: {bind!r}", hint)
    if len(parts) == 3 and parts[2] not in _BIND_OPTIONS:
        raise FieldProblem(field, f"unknown bind option {parts[2]!r} in {bind!r}", hint)


def exec_args(container: ContainerSettings, gpu_vendor: str | None,
              extra_binds: tuple[str, ...] = ()) -> list[str]:
    """`<runtime> exec [options] <image>`: the words before the command run inside.

    Example:
        >>> exec_args(ContainerSettings(image="/p/t.sif", binds=["/scratch"]), "amd")
        ['apptainer', 'exec', '--rocm', '--bind', '/scratch', '/p/t.sif']
    """
    if container.image is None:
        raise ValueError("no container image")
    args = [container.runtime, "exec"]
    if gpu_vendor in GPU_FLAGS:
        args.append(GPU_FLAGS[gpu_vendor])
    for bind in (*container.binds, *extra_binds):
        args += ["--bind", bind]
    return [*args, container.image]
