"""hpo's FIFO choice (hpo.driver.schedulers.fifo_choice) picks what Ray's FIFOScheduler picks,
on real Tune trials, while trials start, pause and end in any order; its count of ended trials
is not pickled."""

from __future__ import annotations

import pickle
import random

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler

from hpo.driver.schedulers.fifo_choice import FifoScheduler, MedianStopping, SkipsEnded
from hpo.driver.schedulers.from_spec import build
from hpo.driver.schedulers.seedable import SeedableASHA
from hpo.spec import spec_from_dict


class _Controller:
    """What a scheduler's choice reads of Tune's controller: its trials, in order."""

    def __init__(self, trials: list[Trial]) -> None:
        self.trials = trials

    def get_trials(self) -> list[Trial]:
        return self.trials


def test_the_choice_is_rays_whatever_the_order_trials_end_in() -> None:
    draws = random.Random(0)
    controller = _Controller([])
    ours, rays = FifoScheduler(), FIFOScheduler()
    for step in range(600):
        if step % 3 == 0:  # the searcher adds a trial
            controller.trials.append(Trial("t", stub=True))
        live = [t for t in controller.trials if t.status not in (Trial.TERMINATED, Trial.ERROR)]
        if live:
            trial = draws.choice(live)  # ends, pauses or runs: ended ones stay ended
            trial.set_status(draws.choice([Trial.RUNNING, Trial.PAUSED, Trial.TERMINATED,
                                           Trial.ERROR, Trial.PENDING]))
        assert ours.choose_trial_to_run(controller) is rays.choose_trial_to_run(controller)
    assert ours._ended_prefix > 0  # the scan did skip ended trials


def test_the_count_of_ended_trials_is_not_pickled() -> None:
    scheduler = FifoScheduler()
    trials = [Trial("t", stub=True) for _ in range(3)]
    trials[0].set_status(Trial.TERMINATED)
    assert scheduler.choose_trial_to_run(_Controller(trials)) is trials[1]
    assert scheduler._ended_prefix == 1
    # a resumed run may requeue the ended trial: the copy scans from the first again
    trials[0].set_status(Trial.PENDING)
    copy = pickle.loads(pickle.dumps(scheduler))
    assert copy.choose_trial_to_run(_Controller(trials)) is trials[0]


def test_fifo_asha_and_median_choose_so() -> None:
    base = {"name": "n", "trainable": "tests/support/study_trainables.py:steady", "metric": "score",
            "mode": "max",
            "search_space": {"x": {"uniform": [0.0, 1.0]}}}
    built = [build(spec_from_dict({**base, "scheduler": {"type": kind}}).scheduler)
             for kind in ("fifo", "asha", "median")]
    assert [type(s) for s in built] == [FifoScheduler, SeedableASHA, MedianStopping]
    assert all(isinstance(s, SkipsEnded) for s in built)
