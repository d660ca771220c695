"""The RASDA-vs-ASHA simulation (benchmarks/rasda_sim.py): ASHA's promotion rule as Ray Tune
applies it, growth within its caps, and the direction of the result under ideal and flat
scaling."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from benchmarks.rasda_sim import (
    Rungs,
    Setup,
    compare,
    parse_scaling,
    simulate,
    synthetic_curves,
)

LINEAR, FLAT = parse_scaling("linear"), parse_scaling("flat")


def test_promotions_follow_ashas_rule_on_a_hand_checked_example() -> None:
    # One device, so the trials run one after another. Rungs at 1 and 2 (and max_t 4).
    # Trial 0 is first at both rungs: promoted at 1 and 2 (an empty rung has no cutoff).
    # Trial 1 at 1: 0.4 < median{0.5} -> stopped. Trial 2 at 1: 0.9 >= median{0.5, 0.4} =
    # 0.45 -> promoted; at 2: 0.3 < median{0.6} -> stopped. Trial 3 at 1: 0.5 ties
    # median{0.5, 0.4, 0.9} = 0.5 -> promoted (a tie stays); at 2: 0.1 < 0.45 -> stopped.
    curves = [[0.5, 0.6, 0.7, 0.8], [0.4, 0.9, 0.9, 0.9], [0.9, 0.3, 0.9, 0.9],
              [0.5, 0.1, 0.9, 0.9]]
    out = simulate(Setup(devices=1, max_t=4, restart_s=0), curves, LINEAR)
    assert out.promotions == [(0, 1), (0, 2), (2, 1), (3, 1)]
    assert out.best == 0.9  # trial 2's first value; trial 1's 0.9 came after its stop
    assert out.time_to_target == math.inf  # no target given


def test_rungs_agree_with_ray_tunes_asha_bracket() -> None:
    from ray.tune.schedulers.async_hyperband import _Bracket
    from ray.tune.schedulers.trial_scheduler import TrialScheduler

    rng = random.Random(3)
    for rf in (2, 3, 4):
        ours, ray = Rungs(1, 27, rf), _Bracket(1, 27, rf, 0)
        progress = {tid: 0 for tid in range(30)}
        while progress:
            tid = rng.choice(sorted(progress))
            progress[tid] += 1
            value = rng.random()
            mine = ours.judge(tid, progress[tid], value)
            theirs = ray.on_result(SimpleNamespace(trial_id=tid), progress[tid], value)
            assert (mine == "stop") == (theirs == TrialScheduler.STOP), (rf, tid, progress[tid])
            if mine == "stop" or progress[tid] >= 27:
                del progress[tid]


def test_growth_is_capped_by_max_workers_and_by_free_devices() -> None:
    curves = [[0.1 * t for t in range(1, 9)]]
    out = simulate(Setup(devices=3, max_t=8, max_workers=8, restart_s=0), curves, LINEAR)
    assert out.growths == [(0, 1, 2)]  # 4 ranks, due at rung 2, do not fit in 3 devices
    capped = simulate(Setup(devices=8, max_t=8, max_workers=2, restart_s=0), curves, LINEAR)
    assert capped.growths == [(0, 1, 2)]


def test_rasda_reaches_the_target_faster_with_linear_scaling() -> None:
    # Curves that never cross: the best trial is promoted at every rung in both runs, so the
    # target (its final value) is reached in both and only the ranks make the difference.
    # Trial 0 is the best: it reaches its rungs first, the others are stopped at rung 1.
    curves = [[(2 - trial / 16) * (1 - math.exp(-t / 4)) for t in range(1, 17)]
              for trial in range(16)]
    target, asha, rasda = compare(Setup(devices=16, max_workers=8), curves, LINEAR)
    assert target == curves[0][-1]
    assert asha.time_to_target == 20 + 16 * 60  # start, then 16 iterations of 60 s
    # At rung 1 no device is free yet (every trial reports at the same moment, trial 0
    # first); at rung 2 it is due 4 ranks and gets them, at rung 4 8 ranks: 1 rank for
    # iterations 1-2, 4 for 3-4, 8 for 5-16, a 20 s restart at each growth.
    assert rasda.time_to_target == pytest.approx(80 + 60 + 35 + 15 + 27.5 + 11 * 7.5)
    assert rasda.growths == [(0, 2, 4), (0, 4, 8)]


def test_rasda_is_faster_on_most_synthetic_searches_with_linear_scaling() -> None:
    # Crossing curves: the asynchronous order of results differs between the runs, and with it
    # which trials a rung keeps, so RASDA can miss ASHA's best (seeds 4 and 6 do).
    faster = 0
    for seed in range(10):
        _, asha, rasda = compare(Setup(devices=16, max_workers=8),
                                 synthetic_curves(16, 16, seed), LINEAR)
        faster += rasda.time_to_target < asha.time_to_target
    assert faster >= 8


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("per_device", [1, 3])
def test_rasda_is_not_faster_without_speed_up(seed: int, per_device: int) -> None:
    curves = synthetic_curves(16 * per_device, 16, seed)
    _, asha, rasda = compare(Setup(devices=16, max_workers=8), curves, FLAT)
    assert rasda.time_to_target >= asha.time_to_target
    assert rasda.device_s >= asha.device_s


def test_seeded_runs_repeat_exactly() -> None:
    setup = Setup(devices=32, max_workers=4)
    first = compare(setup, synthetic_curves(64, 16, 7), parse_scaling("cpu-ddp"))
    again = compare(setup, synthetic_curves(64, 16, 7), parse_scaling("cpu-ddp"))
    other = compare(setup, synthetic_curves(64, 16, 8), parse_scaling("cpu-ddp"))
    assert first == again
    assert first != other


def test_scaling_curve_is_checked_and_extrapolated_per_doubling() -> None:
    curve = parse_scaling("1:1,2:1.8")
    assert curve.at(2) == pytest.approx(1.8)
    assert curve.at(8) == pytest.approx(1.8 ** 3)  # each doubling repeats the last gain
    with pytest.raises(ValueError, match="1:1"):
        parse_scaling("2:1.8")
