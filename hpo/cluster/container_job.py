"""What a batch script adds when its job runs in a container (`slurm.container`): pure renders.

The batch shell stays on the host: it loads the modules, exports the variables and starts the
helper that runs srun for hpo (host-steps.sh). hpo itself, each node's Ray, and the trials
Ray forks or starts run in the image: the driver by the script's own `<runtime> exec` line,
each node's Ray by the same words before its command in its srun step (`HPO_CONTAINER`).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from hpo.cluster.steps import CONTAINER, HOST_STEPS
from hpo.spec.container import exec_args
from hpo.spec.slurm import SlurmSettings

HOST_STEPS_SCRIPT = Path(__file__).with_name("host-steps.sh")
_STEPS_BIND = f'"${HOST_STEPS}"'  # the helper's folder, bound where hpo asks from
# A venv holding torch and Ray: the file count measured here (docs/slurm.md)
VENV_FILES = 60_000


def container_words(s: SlurmSettings) -> list[str]:
    """`<runtime> exec [options] <image>` for this job (its GPUs by the profile's vendor)."""
    return exec_args(s.container, s.gpu_vendor)


def driver_prefix(s: SlurmSettings) -> str:
    """The words before `python -m hpo ...` in the batch script: the driver in the image,
    with the step helper's folder bound (a site may not bind /tmp by default)."""
    words = container_words(s)
    inner = [*words[:-1], "--bind", _STEPS_BIND, words[-1]]
    return " ".join(w if w == _STEPS_BIND else shlex.quote(w) for w in inner)


def environment_lines(s: SlurmSettings) -> list[str]:
    """The variables that must reach the inside, set with the runtime's prefix (which the
    image's own %environment cannot override), and the words that wrap each step."""
    prefix = s.container.env_prefix
    variables = {**s.env, **s.container.env}
    lines = ["# inside the container too (the image's own environment cannot override these)"]
    lines += [f'export {prefix}{name}="{value}"' for name, value in variables.items()]
    lines.append(f"export {CONTAINER}={shlex.quote(shlex.join(container_words(s)))}")
    return lines


def host_steps() -> str:
    """The host-side helper's lines: run before hpo, after every variable is exported (the
    steps it starts get the batch shell's environment as it was then)."""
    return HOST_STEPS_SCRIPT.read_text()


def quota_warning(s: SlurmSettings, prefix: str = sys.prefix,
                  base_prefix: str = sys.base_prefix) -> str | None:
    """One line when the job's venv (outside a container: slurm.venv, else the one rendering)
    lies on a file system whose file count is limited (the profile's `file_quotas`)."""
    venv = s.venv or (prefix if prefix != base_prefix else None)
    if venv is None or s.container.enabled:
        return None
    path = str(Path(venv).expanduser())
    for where, files in s.file_quotas.items():
        if path.startswith(where):
            return (f"the job's venv {path} lies on {where} ({files} files at most; a venv "
                    f"with torch and Ray holds about {VENV_FILES}). Hint: slurm.container "
                    "with a venv on top of the site's image (docs/first-job.md), or a venv "
                    "elsewhere")
    return None
