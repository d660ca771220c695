"""The spec's `scheduler` section -> Ray's trial scheduler. Options keep Ray's names, so
each section's fields (hpo.spec.schedulers) pass to Ray's class as they are. Ray's classes are
imported when a scheduler is built, not with this module: the CLI imports it before Ray."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpo.spec.distributions import Distribution
from hpo.spec.model import Spec
from hpo.spec.schedulers import Asha, Fifo, HyperBand, Median, Pb2, Pbt, Rasda, Scheduler


def scheduler(spec: Spec, guard: Any = None) -> Any:
    """Ray's trial scheduler, its draws seeded by search.seed; rasda's also needs the ranks it
    grows and, inside Slurm, the allocation's clock (`guard`: hpo.driver.guards.walltime)."""
    if isinstance(spec.scheduler, Rasda):
        from hpo.driver.plugins.rasda import RasdaScheduler

        assert spec.distributed is not None  # the spec refuses rasda without it
        return RasdaScheduler(spec.scheduler, spec.distributed, guard)
    built = build(spec.scheduler)
    seed_draws = getattr(built, "seed_draws", None)  # ASHA, PBT, PB2: seedable.py
    if seed_draws is not None and spec.search.seed is not None:
        seed_draws(spec.search.seed)
    return built


def build(options: Scheduler) -> Any:
    """Ray's scheduler for one section, unseeded (rasda's needs the run: see `scheduler`)."""
    if isinstance(options, Rasda):
        raise TypeError("rasda's scheduler needs the run's ranks: build it with scheduler()")
    return _BUILDERS[type(options)](options)


def _fifo(options: Fifo) -> Any:
    from hpo.driver.schedulers.fifo_choice import FifoScheduler

    return FifoScheduler()


def _asha(options: Asha) -> Any:
    from hpo.driver.schedulers.seedable import SeedableASHA

    return SeedableASHA(**options.model_dump(exclude={"type"}))


def _hyperband(options: HyperBand) -> Any:
    from ray.tune.schedulers import HyperBandScheduler

    return HyperBandScheduler(**options.model_dump(exclude={"type"}))


def _median(options: Median) -> Any:
    from hpo.driver.schedulers.fifo_choice import MedianStopping

    return MedianStopping(**options.model_dump(exclude={"type"}))


def _pbt(options: Pbt) -> Any:
    from hpo.driver.schedulers.seedable import SeedablePBT

    rest = options.model_dump(exclude={"type", "hyperparam_mutations"})
    mutations = {k: _mutation(d) for k, d in options.hyperparam_mutations.items()}
    return SeedablePBT(hyperparam_mutations=mutations, **rest)


def _mutation(dist: Distribution) -> Any:
    # PBT perturbs a list by moving to a neighbouring value: keep choices ordered as written.
    return list(dist.args) if dist.kind == "choice" else dist.to_tune()


def _pb2(options: Pb2) -> Any:
    # its own module: importing Ray's PB2 imports scikit-learn and SciPy
    from hpo.driver.schedulers.seedable_bandits import SeedablePB2

    rest = options.model_dump(exclude={"type", "hyperparam_mutations"})
    bounds = {k: list(d.bounds or ()) for k, d in options.hyperparam_mutations.items()}
    return SeedablePB2(hyperparam_bounds=bounds, **rest)


_BUILDERS: dict[type, Callable[[Any], Any]] = {
    Fifo: _fifo, Asha: _asha, HyperBand: _hyperband, Median: _median, Pbt: _pbt, Pb2: _pb2}
