"""A trial against the job that would run it (the merged `slurm:` settings), checked at render:
one that could never start would wait in the queue, then start nothing. Render only: inside
the job Ray's real nodes decide (hpo.driver.run.preflight), and the job's `hpo slurm run` does not
see render's options (`-N`, `--gpus-per-node`)."""

from __future__ import annotations

from hpo.errors import ConfigError
from hpo.spec.model import Spec
from hpo.spec.slurm import SlurmSettings


def check_fits_the_job(spec: Spec, slurm: SlurmSettings, source: str) -> list[str]:
    """Raises ConfigError for a data-parallel trial with more GPUs than the whole job has (a
    GPU is a whole device: exact); returns a warning line for a trial or rank with more CPUs
    than the job asks per node (Slurm may count hardware threads: not exact)."""
    _check_gpus_asked(spec, slurm, source)
    ranks = spec.distributed
    if ranks and ranks.gpus_per_worker and slurm.gpus_per_node:
        need, has = ranks.workers * ranks.gpus_per_worker, slurm.nodes * slurm.gpus_per_node
        if need > has:
            raise ConfigError(source, "distributed.workers", f"a trial has {ranks.workers} "
                              f"ranks x {ranks.gpus_per_worker:g} GPUs = {need:g}, but the job "
                              f"has {has} ({slurm.nodes} node(s) x {slurm.gpus_per_node}): it "
                              "would never start", "lower workers, or ask for more nodes "
                              "(--nodes)")
    one = ranks.cpus_per_worker if ranks else spec.resources.cpus_per_trial
    asked, said = _cpus_asked(slurm)
    if asked is None or one <= asked:
        return []
    key = "distributed.cpus_per_worker" if ranks else "resources.cpus_per_trial"
    return [f"{key}: one {'rank' if ranks else 'trial'} asks for {one:g} CPUs, but the job "
            f"asks for {asked} per node ({said}): it may never start. Hint: lower {key}, or "
            "ask for more CPUs per node (--cpus-per-node)"]


def _check_gpus_asked(spec: Spec, slurm: SlurmSettings, source: str) -> None:
    """A trial or rank that asks for GPUs in a job that asks for none would never start (a
    GPU asked for through slurm.sbatch, e.g. --gres=gpu:4, counts as asked)."""
    ranks = spec.distributed
    need = ranks.gpus_per_worker if ranks else spec.resources.gpus_per_trial
    if not need or slurm.gpus_per_node or any("gpu" in o.lower() for o in slurm.sbatch):
        return
    key = "distributed.gpus_per_worker" if ranks else "resources.gpus_per_trial"
    raise ConfigError(source, key, f"one {'rank' if ranks else 'trial'} asks for {need:g} "
                      "GPUs, but the job asks for none (slurm.gpus_per_node is 0): it would "
                      f"never start", f"set {key} to 0 on a CPU-only site, or ask for GPUs "
                      "(--gpus-per-node, slurm.gpus_per_node)")


def _cpus_asked(slurm: SlurmSettings) -> tuple[int | None, str]:
    """The CPUs the job asks per node (its --cpus-per-task), and where that number comes from."""
    said = "slurm.cpus_per_node" if slurm.cpus_per_node is not None else \
        f"slurm.cpus_per_gpu {slurm.cpus_per_gpu} x gpus_per_node {slurm.gpus_per_node}"
    return slurm.cpus_per_task, said
