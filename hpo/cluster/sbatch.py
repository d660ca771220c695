"""The sbatch script of an experiment: a pure render of hpo-job.sbatch (shipped in the package
next to this module, shipped with the package).

The script asks for one task per node (Ray runs one node process per node), a warning
signal to the batch shell alone before the time limit (SIGUSR1 reaching Ray's processes
would kill them), and `--no-kill` (a lost node must not end the job: Ray retries its trials
elsewhere).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hpo.cluster import container_job
from hpo.errors import ConfigError
from hpo.spec.slurm import SlurmSettings

TEMPLATE = Path(__file__).with_name("hpo-job.sbatch")

# The batch shell starts hpo in the background and waits for it; a trapped signal ends a
# `wait` early, so it waits again until hpo has exited (shared with hpo-join.sbatch).
WAIT_FOR_HPO = """\
{command} &
hpo_pid=$!
while :; do
  wait "$hpo_pid"
  status=$?
  kill -0 "$hpo_pid" 2>/dev/null || break  # wait also returns when a signal arrives
done
"""

# scancel (and the end of the job) sends SIGTERM to every process of the job, this shell
# too: it stays until hpo has ended, so hpo stays in the job and Slurm's SIGKILL after
# KillWait still reaches it (a site that tracks a job's processes by their parents, as
# proctrack/linuxproc does, loses an orphan: it ran on and held the study).
KEEP_ON_TERM = """\
trap ':' TERM  # hpo got it too; this shell waits for hpo (Slurm kills both after KillWait)
"""

_RUN = KEEP_ON_TERM + WAIT_FOR_HPO + 'exit "$status"\n'

_REQUEUE_RUN = """\
# Slurm sends USR1 to this shell alone {seconds} s before the time limit. Pass it on to hpo,
# which stops the trials gracefully and saves the experiment; then requeue this job, and
# the next run resumes the experiment (no finished trial is re-run).
stopping=0
trap 'stopping=1; kill -USR1 "$hpo_pid" 2>/dev/null' USR1
""" + KEEP_ON_TERM + WAIT_FOR_HPO + """\
if [ "$stopping" = 1 ] && [ "$status" != 0 ]; then
  echo "hpo: stopped before the time limit; requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
"""


def sbatch_options(name: str, s: SlurmSettings) -> list[str]:
    """The #SBATCH lines, one option each."""
    options = [f"--job-name={name}", f"--nodes={s.nodes}", "--ntasks-per-node=1"]
    if s.cpus_per_task is not None:
        options.append(f"--cpus-per-task={s.cpus_per_task}")
    if s.gpus_per_node:
        options.append(f"--gres=gpu:{s.gpus_per_node}" if s.gpu_option == "gres"
                       else f"--gpus-per-node={s.gpus_per_node}")
    if s.memory_option is not None:
        options.append(s.memory_option)
    options.append(f"--time={s.time}")
    options += [f"--{key}={value}" for key, value in
                (("partition", s.partition), ("account", s.account)) if value]
    options += ["--output=hpo-%x-%j.out", "--no-kill"]
    if s.requeue:
        # append: a requeued run keeps the first run's output above its own
        options += ["--requeue", f"--signal=B:USR1@{s.signal_seconds}", "--open-mode=append"]
    return options + list(s.sbatch)


@dataclass(frozen=True)
class JobPython:
    """How the job finds the hpo that rendered it: lines after the module loads (which may
    put a site Python first on PATH) and the interpreter that runs `-m hpo`."""

    lines: tuple[str, ...]
    python: str
    prefix: str = ""  # shell words before it: the container's `<runtime> exec ... <image>`

    def command(self, args: Sequence[str]) -> str:
        """The shell line that runs `python ARGS` (in the container, if any)."""
        line = shlex.join([self.python, *args])
        return f"{self.prefix} {line}" if self.prefix else line

    @classmethod
    def for_job(cls, s: SlurmSettings, source: str) -> JobPython:
        """In the job's container (slurm.venv is the host's: refused there), else `of`."""
        if not s.container.enabled:
            return cls.of(s.venv, source)
        if s.venv is not None:
            raise ConfigError(source, "slurm.venv", f"{s.venv} is a venv outside the "
                              "container, but the job runs in slurm.container", "set "
                              "slurm.container.venv (a venv made inside the image) instead")
        return cls((), s.container.python, container_job.driver_prefix(s))

    @classmethod
    def of(cls, venv: str | None, source: str, prefix: str = sys.prefix,
           base_prefix: str = sys.base_prefix, executable: str = sys.executable) -> JobPython:
        """slurm.venv if set (it must exist), else the environment this process runs in: a
        venv is activated, a conda prefix goes first on PATH, any other Python is named by
        its absolute path."""
        if venv is not None:
            folder = Path(venv).expanduser()
            if not (folder / "bin" / "activate").is_file():
                raise ConfigError(source, "slurm.venv", f"no virtual environment at {venv} "
                                  "(no bin/activate)", "create it with python -m venv, or "
                                  "leave venv out: the job then uses the environment that "
                                  "renders it")
            return cls((f"source {shlex.quote(str(folder / 'bin' / 'activate'))}",), "python")
        if prefix != base_prefix:  # the venv this hpo runs in
            return cls(("# the environment `hpo slurm` ran in (slurm.venv to choose another)",
                        f"source {shlex.quote(str(Path(prefix) / 'bin' / 'activate'))}"),
                       "python")
        if (Path(prefix) / "conda-meta").is_dir():
            return cls(("# the conda environment `hpo slurm` ran in",
                        f'export PATH={shlex.quote(str(Path(prefix) / "bin"))}:"$PATH"'),
                       executable)
        return cls((), executable)


def environment(s: SlurmSettings, workdir: str, python: JobPython) -> list[str]:
    """Module loads, then the job's Python (after the modules: a site Python module would
    hide it), the site's variables, the user's set-up lines, then cd to the project.
    Variables come after the modules (which may set their own) and are exported, so every
    srun step (each node's Ray, the trials) inherits them."""
    lines = [f"module load {' '.join(shlex.quote(m) for m in s.modules)}"] if s.modules else []
    lines += python.lines
    # Double quotes: $SLURM_JOB_ID and the like expand (values are checked to stay inside).
    lines += [f'export {name}="{value}"' for name, value in s.env.items()]
    if s.container.enabled:
        lines += container_job.environment_lines(s)
    lines += s.setup
    lines.append(f"cd {shlex.quote(workdir)}")
    return lines


def hpo_command(python: JobPython, space: str, storage: str | None, name: str | None,
                site: str | None, overrides: Sequence[str]) -> str:
    args = ["-m", "hpo", "slurm", "run", space]
    for flag, value in (("--storage", storage), ("--name", name), ("--site", site)):
        if value:
            args += [flag, value]
    for item in overrides:
        args += ["--set", item]
    return python.command(args)


def render_sbatch(name: str, space: str, settings: SlurmSettings, *, workdir: str,
                  storage: str | None = None, run_name: str | None = None,
                  site: str | None = None, overrides: Sequence[str] = (),
                  template: Path = TEMPLATE, python: JobPython | None = None) -> str:
    """The whole sbatch script as text (deterministic: no dates, no absolute paths added).

    Example:
        >>> print(render_sbatch("digits", "space.yaml", SlurmSettings(nodes=2), workdir="."))
    """
    python = python or JobPython.for_job(settings, space)
    command = hpo_command(python, space, storage, run_name, site, overrides)
    run = (_REQUEUE_RUN if settings.requeue else _RUN).format(
        seconds=settings.signal_seconds, command=command)
    if settings.container.enabled:
        run = container_job.host_steps() + "\n" + run
    return fill_template(template, space, sbatch_options(name, settings),
                         environment(settings, workdir, python), run)


def fill_template(template: Path, space: str, options: Sequence[str],
                  environment_lines: Sequence[str], run: str) -> str:
    """The template with its four parts filled in."""
    values = {
        "space": space,
        "sbatch_options": "\n".join(f"#SBATCH {o}" for o in options),
        "environment": "\n".join(environment_lines),
        "run": run.rstrip("\n"),
    }
    text = template.read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text
