"""Spec -> Ray objects for every scheduler, searcher and distribution in the registries,
and scheduler decisions checked deterministically by feeding results (no cluster)."""

from __future__ import annotations

from typing import Any

import pytest
from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import (
    ASHAScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)
from ray.tune.schedulers.pb2 import PB2
from ray.tune.search import sample
from ray.tune.search.basic_variant import BasicVariantGenerator
from ray.tune.search.optuna import OptunaSearch

from hpo.driver.plugins.rasda import RasdaScheduler
from hpo.driver.run import translate
from hpo.driver.run.translate import param_space
from hpo.driver.schedulers.from_spec import build
from hpo.spec.distributions import KINDS, Distribution
from hpo.spec.load import spec_from_dict
from hpo.spec.schedulers import SCHEDULER_TYPES

BASE = {"name": "t", "trainable": "trainables.digits:train", "metric": "acc", "mode": "max"}
MUTATIONS = {"lr": {"uniform": [0.001, 0.1]}}
SCHEDULERS: dict[str, tuple[dict[str, Any], type]] = {
    "fifo": ({}, FIFOScheduler),
    "asha": ({"max_t": 9, "grace_period": 2, "reduction_factor": 3}, ASHAScheduler),
    "rasda": ({"max_t": 9, "grace_period": 1}, RasdaScheduler),
    "hyperband": ({"max_t": 9}, HyperBandScheduler),
    "median": ({"grace_period": 2}, MedianStoppingRule),
    "pbt": ({"hyperparam_mutations": MUTATIONS}, PopulationBasedTraining),
    "pb2": ({"hyperparam_mutations": MUTATIONS}, PB2),
}


def _spec(**extra: Any) -> Any:
    return spec_from_dict({**BASE, **extra})


def test_table_covers_the_registry() -> None:
    assert set(SCHEDULERS) == set(SCHEDULER_TYPES)


@pytest.mark.parametrize("kind", SCHEDULER_TYPES)
def test_scheduler_builds_rays_class(kind: str) -> None:
    options, cls = SCHEDULERS[kind]
    ranks = {"distributed": {"backend": "ddp", "workers": 1, "max_workers": 4}}
    built = translate.scheduler(_spec(scheduler={"type": kind, **options},
                                      **(ranks if kind == "rasda" else {})))
    # Ray's class itself, or hpo.driver.schedulers' subclass of exactly it
    assert cls in (type(built), type(built).__bases__[-1])


def test_asha_options_reach_ray() -> None:
    asha = build(_spec(scheduler={"type": "asha", "max_t": 9, "grace_period": 2,
                                  "reduction_factor": 3}).scheduler)
    assert (asha._max_t, asha._reduction_factor) == (9, 3)
    assert [milestone for milestone, _ in asha._brackets[0]._rungs] == [6, 2]


def test_pb2_gets_bounds_from_mutations() -> None:
    pb2 = build(_spec(scheduler={"type": "pb2", "hyperparam_mutations": {
        "lr": {"loguniform": [1e-4, 1e-1]}}}).scheduler)
    assert pb2._hyperparam_bounds == {"lr": [1e-4, 1e-1]}


def test_pbt_choice_mutation_stays_an_ordered_list() -> None:
    pbt = build(_spec(scheduler={"type": "pbt", "hyperparam_mutations": {
        "batch": {"choice": [32, 64, 128]}}}).scheduler)
    assert pbt._hyperparam_mutations == {"batch": [32, 64, 128]}


class _Trial(Trial):
    """A Trial that needs no cluster: only what schedulers read."""

    def __init__(self, trial_id: str) -> None:
        super().__init__("t", trial_id=trial_id, stub=True)


def test_asha_decisions_from_fed_results() -> None:
    asha = build(_spec(scheduler={"type": "asha", "max_t": 9, "grace_period": 1,
                                  "reduction_factor": 3}).scheduler)
    asha.set_search_properties("acc", "max")
    trials = [_Trial(f"t{i}") for i in range(4)]
    for trial in trials:
        asha.on_trial_add(None, trial)
    decisions = [asha.on_trial_result(None, trial, {"training_iteration": 1, "acc": acc})
                 for trial, acc in zip(trials, [0.9, 0.8, 0.95, 0.1], strict=True)]
    # First trial at a rung always continues; then only the top 1/3 at the rung goes on.
    assert decisions == [TrialScheduler.CONTINUE, TrialScheduler.STOP,
                         TrialScheduler.CONTINUE, TrialScheduler.STOP]
    last = asha.on_trial_result(None, trials[2], {"training_iteration": 9, "acc": 0.99})
    assert last == TrialScheduler.STOP  # max_t reached


class _NoLiveTrials:
    """The one controller method the median rule asks about (whether others are waiting)."""

    def get_live_trials(self) -> list:
        return []


def test_median_rule_stops_a_laggard() -> None:
    median = build(_spec(scheduler={"type": "median", "grace_period": 1,
                                    "min_samples_required": 2}).scheduler)
    median.set_search_properties("acc", "max")
    controller = _NoLiveTrials()
    good = [_Trial(f"g{i}") for i in range(2)]
    for trial in good:
        median.on_trial_add(controller, trial)
        for step in (1, 2):
            median.on_trial_result(controller, trial, {"training_iteration": step, "acc": 0.9})
        median.on_trial_complete(controller, trial, {"training_iteration": 2, "acc": 0.9})
    bad = _Trial("bad")
    median.on_trial_add(controller, bad)
    decision = median.on_trial_result(controller, bad, {"training_iteration": 2, "acc": 0.1})
    assert decision == TrialScheduler.STOP


SEARCHERS = {"random": BasicVariantGenerator, "grid": BasicVariantGenerator,
             "optuna": OptunaSearch}


@pytest.mark.parametrize("kind", sorted(SEARCHERS))
def test_searcher_builds_rays_class(kind: str) -> None:
    spec = _spec(search={"type": kind},
                 search_space={"lr": {"choice": [0.1, 0.01]}})
    assert type(spec.search.build(spec.metric, spec.mode)) is SEARCHERS[kind]


def test_optuna_sampler_is_seeded_tpe() -> None:
    import optuna

    spec = _spec(search={"type": "optuna", "seed": 7, "n_startup_trials": 3})
    searcher = spec.search.build(spec.metric, spec.mode)
    assert isinstance(searcher._sampler, optuna.samplers.TPESampler)
    assert searcher._sampler._n_startup_trials == 3
    assert searcher._sampler._constant_liar  # the default: trials run side by side
    again = spec.search.build(spec.metric, spec.mode)._sampler._rng.rng.random()
    assert searcher._sampler._rng.rng.random() == again
    off = _spec(search={"type": "optuna", "constant_liar": False}).search
    assert not off.build(spec.metric, spec.mode)._sampler._constant_liar


def _asha_brackets(scheduler: Any, trials: int, between: Any = None) -> list[int]:
    """Add trials to an ASHA scheduler (calling between() after each): each one's bracket."""
    from types import SimpleNamespace

    drawn = []
    for index in range(trials):
        scheduler.on_trial_add(None, SimpleNamespace(trial_id=f"t{index}"))
        drawn.append(scheduler._brackets.index(scheduler._trial_info[f"t{index}"]))
        if between is not None:
            between()
    return drawn


def _seeded_asha(seed: int | None) -> Any:
    from hpo.spec.schedulers import Asha

    scheduler = build(Asha(type="asha", max_t=9, brackets=3))
    scheduler.set_search_properties("score", "max")
    if seed is not None:
        scheduler.seed_draws(seed)
    return scheduler


def test_a_seeded_schedulers_draws_repeat_whatever_else_draws() -> None:
    """ASHA must not draw its brackets from numpy's global RNG: anything else in the driver
    that drew from it during a run would change the seeded run's brackets."""
    import random

    import numpy as np

    quiet = _asha_brackets(_seeded_asha(3), 40)
    noisy = _asha_brackets(_seeded_asha(3), 40, between=lambda: (np.random.random(),
                                                                 random.random()))
    assert noisy == quiet
    assert len(set(quiet)) == 3, "every bracket drawn at least once"
    assert _asha_brackets(_seeded_asha(4), 40) != quiet


def test_a_seeded_scheduler_leaves_the_process_streams_alone() -> None:
    import random

    import numpy as np

    random.seed(1)
    np.random.seed(1)
    expected = random.random(), float(np.random.random())
    random.seed(1)
    np.random.seed(1)
    _asha_brackets(_seeded_asha(3), 10)
    assert (random.random(), float(np.random.random())) == expected
    np.random.seed(1)  # unseeded, the scheduler draws from the process's stream, as Ray's does
    _asha_brackets(_seeded_asha(None), 10)
    assert float(np.random.random()) != expected[1]


def test_a_seeded_schedulers_streams_pickle_with_it() -> None:
    import pickle

    scheduler = _seeded_asha(3)
    _asha_brackets(scheduler, 5)
    copy = pickle.loads(pickle.dumps(scheduler))
    assert type(copy).__module__ == "hpo.driver.schedulers.seedable"
    assert _asha_brackets(copy, 20) == _asha_brackets(scheduler, 20)


def test_the_search_seed_reaches_the_schedulers_that_draw() -> None:
    for kind, seed in (("asha", 7), ("pbt", 7), ("asha", None)):
        options = {"type": kind, **({"hyperparam_mutations": {"lr": {"uniform": [0, 1]}}}
                                    if kind == "pbt" else {})}
        spec = spec_from_dict({**BASE, "scheduler": options,
                               "search": {"type": "random", "seed": seed}})
        built = translate.scheduler(spec)
        assert (built._own_streams is not None) == (seed is not None), kind


def test_grid_search_turns_choice_into_grid() -> None:
    spec = _spec(search={"type": "grid"}, search_space={"b": {"choice": [1, 2]}},
                 constants={"epochs": 3})
    assert param_space(spec) == {"epochs": 3, "b": {"grid_search": [1, 2]}}


DOMAINS = {
    "uniform": ([0.0, 1.0], sample.Float), "quniform": ([0.0, 1.0, 0.1], sample.Float),
    "loguniform": ([1e-4, 1.0], sample.Float), "qloguniform": ([1e-4, 1.0, 1e-4], sample.Float),
    "randint": ([0, 10], sample.Integer), "qrandint": ([0, 10, 2], sample.Integer),
    "lograndint": ([1, 100], sample.Integer), "qlograndint": ([1, 100, 2], sample.Integer),
    "randn": ([0.0, 1.0], sample.Float), "qrandn": ([0.0, 1.0, 0.5], sample.Float),
    "choice": ([1, 2, 3], sample.Categorical), "grid": ([1, 2], dict),
}


def test_domain_table_covers_every_kind() -> None:
    assert set(DOMAINS) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(DOMAINS))
def test_distribution_to_tune_domain(kind: str) -> None:
    args, cls = DOMAINS[kind]
    domain = Distribution.model_validate({kind: args}).to_tune()
    assert isinstance(domain, cls)
    if isinstance(domain, sample.Domain):
        values = [domain.sample() for _ in range(50)]
        if kind in ("uniform", "loguniform", "randint", "lograndint"):
            assert all(args[0] <= v <= args[1] for v in values)
        if kind == "choice":
            assert set(values) <= set(args)


def test_yaml_numbers_as_people_write_them() -> None:
    from hpo.spec.load import parse_yaml

    data = parse_yaml("a: 1e-4\nb: 1.0e-1\nc: 5e3\nd: 12\ne: -2E-3\nf: e5", "t.yaml")
    assert data == {"a": 1e-4, "b": 0.1, "c": 5000.0, "d": 12, "e": -0.002, "f": "e5"}
    spec = _spec(search_space={"lr": parse_yaml("{loguniform: [1e-4, 1e-1]}", "t")})
    assert spec.search_space["lr"].args == (1e-4, 0.1)


def test_tune_is_importable_without_a_cluster() -> None:
    assert callable(tune.Tuner)
