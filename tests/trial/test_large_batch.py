"""Large-batch helpers and the built-in image trainable's pieces, on one process."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import torch
from calls import hpo_cli
from sklearn.metrics import f1_score

from hpo import dist
from hpo.errors import ConfigError
from hpo.trial.large_batch import (
    REMOVED,
    BatchSchedule,
    check_trial_config,
    lr_for_batch,
    make_optimizer,
)
from hpo.trial.session import local_trial
from trainables import images


@pytest.mark.parametrize(("rule", "expected"), [("linear", 0.4), ("sqrt", 0.2), ("none", 0.1)])
def test_lr_follows_the_global_batch_against_the_reference(rule: str, expected: float) -> None:
    assert lr_for_batch(0.1, 1024, 256, rule) == pytest.approx(expected)
    assert lr_for_batch(0.1, 256, 256, rule) == pytest.approx(0.1)  # lr means lr there


def test_no_code_path_scales_the_lr_by_the_rank_count() -> None:
    """The rank count enters only the split of the batch, never the schedule's math."""
    config = {"batch_schedule": {"start": 64, "max": 256, "lr_rule": "linear",
                                 "ramp_steps": 3}}
    one, four = (BatchSchedule.from_config(config, workers=n) for n in (1, 4))
    assert one == four
    root = Path(__file__).resolve().parents[2]
    for path in [*root.glob("hpo/**/*.py"), *root.glob("trainables/*.py")]:
        text = path.read_text()
        assert "scaled_lr" not in text and "lr * dist.size" not in text, path


def test_the_batch_doubles_every_k_epochs_up_to_max() -> None:
    schedule = BatchSchedule.from_config(
        {"batch_schedule": {"start": 64, "max": 1000, "double_every": 2}})
    assert [schedule.global_batch(e) for e in range(10)] == [
        64, 64, 128, 128, 256, 256, 512, 512, 1000, 1000]
    fixed = BatchSchedule.from_config({"batch_size": 96})
    assert (fixed.global_batch(0), fixed.global_batch(50)) == (96, 96)
    assert BatchSchedule.from_config({}, default_batch=32).global_batch(9) == 32


def test_the_lr_ramps_over_steps_at_each_growth() -> None:
    schedule = BatchSchedule.from_config({"batch_schedule": {
        "start": 64, "max": 256, "lr_rule": "linear", "ramp_steps": 4}})
    items = 1024  # 16 steps at 64, 8 at 128, 4 at 256
    assert [schedule.lr(0.1, 0, s, items) for s in (0, 15)] == [0.1, 0.1]  # reference = start
    ramp = [schedule.lr(0.1, 1, s, items) for s in range(6)]
    assert ramp == pytest.approx([0.125, 0.15, 0.175, 0.2, 0.2, 0.2])
    # a ramp longer than an epoch goes on in the next epoch at the same batch
    long = BatchSchedule.from_config({"batch_schedule": {
        "start": 64, "max": 128, "lr_rule": "linear", "ramp_steps": 16}})
    assert long.lr(0.1, 1, 7, items) == pytest.approx(0.15)  # 8 of 16 steps
    assert long.lr(0.1, 2, 7, items) == pytest.approx(0.2)


def test_the_start_ramps_from_the_reference_batch_goyal_warmup() -> None:
    schedule = BatchSchedule.from_config({"batch_size": 1024, "lr_reference_batch": 256,
                                          "batch_schedule.lr_rule": "linear",
                                          "batch_schedule.ramp_steps": 2})
    assert [schedule.lr(0.1, 0, s, 8192) for s in range(3)] == pytest.approx([0.25, 0.4, 0.4])


def test_the_seeds_schedule_switches_once_and_rewarms_the_lr() -> None:
    """One switch from a small to a large global batch at a given epoch (seed 001: 512 to
    16,384 after 20 epochs), the LR ramped in again at the switch."""
    schedule = BatchSchedule.from_config({"batch_schedule": {
        "start": 64, "max": 512, "switch_at": 3, "lr_rule": "linear", "ramp_steps": 2}})
    assert [schedule.global_batch(e) for e in range(6)] == [64, 64, 64, 512, 512, 512]
    items = 1024
    assert schedule.lr(0.1, 2, 15, items) == pytest.approx(0.1)
    assert [schedule.lr(0.1, 3, s, items) for s in range(3)] == pytest.approx([0.45, 0.8, 0.8])
    assert schedule.first_epoch(5) == 3 and schedule.first_epoch(2) == 0


def test_warmup_from_zero_then_a_decay_to_zero_at_the_last_epoch() -> None:
    """The LARS/LAMB papers' shape: linear warm-up over steps counted across epochs, then
    polynomial (power 2) or cosine decay with the training's progress."""
    items = 1024  # 16 steps an epoch at 64, 8 at 128
    config = {"epochs": 4, "batch_schedule": {"start": 64, "max": 128, "double_every": 2,
                                              "warmup_steps": 20, "decay": "poly"}}
    poly = BatchSchedule.from_config(config)
    assert poly.lr(1.0, 0, 0, items) == pytest.approx(1 / 20 * (1 - 1 / 64) ** 2)
    assert poly.lr(1.0, 1, 3, items) == pytest.approx((1 - 1.25 / 4) ** 2)  # step 20: warm
    assert poly.lr(1.0, 2, 3, items) == pytest.approx((1 - 2.5 / 4) ** 2)  # 8 steps at 128
    assert poly.lr(1.0, 3, 7, items) == 0.0  # the last step of the last epoch
    cosine = BatchSchedule.from_config({**config, "batch_schedule.decay": "cosine",
                                        "batch_schedule.warmup_steps": 0})
    assert cosine.lr(1.0, 1, 15, items) == pytest.approx(0.5)  # half way
    rates = [cosine.lr(1.0, e, s, items) for e in range(4) for s in range(cosine.steps(e, items))]
    assert rates == sorted(rates, reverse=True) and rates[-1] == pytest.approx(0.0)
    # the trainable's default length counts when the config has no `epochs`
    default = BatchSchedule.from_config({"batch_schedule.decay": "poly"}, default_epochs=8)
    assert default.epochs == 8


def test_flat_searched_fields_win_over_the_nested_constants() -> None:
    schedule = BatchSchedule.from_config({"batch_schedule": {"start": 64, "double_every": 3},
                                          "batch_schedule.double_every": 1,
                                          "batch_schedule.max": 256.0})  # quniform gives floats
    assert (schedule.double_every, schedule.max) == (1, 256)


BAD = [  # config, the one line's start after "space.yaml: "
    ({"batch_schedule": {"doubel_every": 2}},
     "batch_schedule.doubel_every: unknown key 'doubel_every'. Hint: did you mean "
     "'double_every'?"),
    ({"batch_schedule.strat": 64}, "batch_schedule.strat: unknown key 'strat'. Hint: did you "
     "mean 'start'?"),
    ({"batch_schedule": {"lr_rule": "sqr"}},
     "batch_schedule.lr_rule: unknown value 'sqr'. Hint: did you mean 'sqrt'?"),
    ({"batch_schedule": {"double_every": 0}},
     "batch_schedule.double_every: must be a positive whole number (got 0)."),
    ({"batch_schedule": {"ramp_steps": -1}},
     "batch_schedule.ramp_steps: must be a whole number >= 0 (got -1)."),
    ({"batch_schedule": {"start": 1.5}}, "batch_schedule.start: must be a positive whole"),
    ({"batch_schedule": {"max": True}}, "batch_schedule.max: must be a positive whole"),
    ({"batch_schedule": [64, 128]}, "batch_schedule: expected a mapping, got [64, 128]."),
    ({"batch_size": 512, "batch_schedule": {"max": 256}},
     "batch_schedule.max: must be >= the first global batch (got 256 < 512)."),
    ({"batch_size": 64, "batch_schedule": {"start": 64}},
     "batch_schedule.start: sets the first global batch, as batch_size does."),
    ({"batch_size": "big"}, "batch_size: must be a positive whole number (got 'big')."),
    ({"lr_reference_batch": 0}, "lr_reference_batch: must be a positive whole number"),
    ({"batch_schedule": {"decay": "linear"}},
     "batch_schedule.decay: unknown value 'linear'. Hint: "),
    ({"batch_schedule.decay_power": 0}, "batch_schedule.decay_power: must be a number > 0 "
     "(got 0). Hint: e.g. 2"),
    ({"batch_schedule": {"warmup_steps": -5}},
     "batch_schedule.warmup_steps: must be a whole number >= 0 (got -5)."),
    ({"batch_schedule": {"switch_at": 0}},
     "batch_schedule.switch_at: must be a positive whole number (got 0)."),
    ({"batch_schedule": {"switch_at": 20, "double_every": 2}},
     "batch_schedule.switch_at: switches the batch once, to max; double_every doubles it "
     "repeatedly. Hint: give one of"),
]


@pytest.mark.parametrize(("config", "expected"), BAD, ids=[line.split(":")[0] for _, line in BAD])
def test_bad_values_fail_in_one_line_naming_the_key(config: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_trial_config(config, "space.yaml")
    message = str(caught.value)
    assert message.startswith(f"space.yaml: {expected}"), message
    assert "\n" not in message


def test_a_decay_needs_the_length_of_training() -> None:
    with pytest.raises(ConfigError, match=(
            r"^trial config: batch_schedule.decay: poly decays the rate to the end of training, "
            r"whose length is unknown. Hint: set the trial's `epochs`")):
        BatchSchedule.from_config({"batch_schedule": {"decay": "poly"}})
    check_trial_config({"batch_schedule": {"decay": "poly"}}, "space.yaml")  # epochs searched


@pytest.mark.parametrize("key", sorted(REMOVED))
def test_a_removed_key_says_what_replaced_it(key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_trial_config({key: 1}, "space.yaml")
    message = str(caught.value)
    assert message.startswith(f"space.yaml: {key}: removed ({key}: 1): ")
    assert "Hint: " in message and "batch_schedule." in message and "\n" not in message


@pytest.mark.parametrize(("config", "key", "batch"), [
    ({"batch_size": 100}, "batch_size", 100),
    ({"batch_schedule": {"start": 32}}, "batch_schedule.start", 32),
    ({"batch_size": 96, "batch_schedule": {"max": 1000}}, "batch_schedule.max", 1000),
    ({"batch_schedule.max": 1000}, "batch_schedule.max", 1000),  # start searched: max alone
])
def test_a_batch_that_does_not_split_names_both_keys(config: dict, key: str,
                                                      batch: int) -> None:
    with pytest.raises(ConfigError, match=(
            f"^space.yaml: {key}: global batch {batch} does not split over "
            "distributed.workers=3 ranks. Hint: use a multiple of 3")):
        check_trial_config(config, "space.yaml", workers=3)
    check_trial_config({"batch_size": 96, "batch_schedule": {"max": 768}}, "space.yaml", 3)


@contextlib.contextmanager
def _as_rank(rank: int, ranks: int) -> Iterator[None]:
    """This process seen as one DDP rank (rank and size come from the environment)."""
    saved = dist._backend
    dist._backend = "ddp"
    try:
        with mock.patch.dict(os.environ, {"WORLD_SIZE": str(ranks), "RANK": str(rank)}):
            yield
    finally:
        dist._backend = saved


def test_the_rank_split_names_the_keys_inside_a_trial() -> None:
    with _as_rank(1, 2), pytest.raises(ConfigError, match=(
            "^trial config: batch_size: global batch 7 does not split over "
            "distributed.workers=2 ranks")):
        dist.local_batch_size(7)


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_every_global_step_takes_the_same_samples_on_any_rank_count(ranks: int) -> None:
    steps = []
    for rank in range(ranks):
        with _as_rank(rank, ranks):
            steps.append(list(dist.batches(100, epoch=3, global_batch=16, seed=5)))
    assert {len(rows) for rows in steps} == {6}  # 100 // 16 steps on every rank
    order = dist.epoch_order(100, 3, seed=5)
    for step in range(6):
        taken = torch.cat([rows[step] for rows in steps])
        assert sorted(taken.tolist()) == sorted(order[16 * step:16 * (step + 1)].tolist())
    # a batch that changes mid-epoch: the offset counts the rows already taken
    with _as_rank(ranks - 1, ranks):
        late = dist.rank_rows(order, 48, 32)
    assert set(late.tolist()) <= set(order[48:80].tolist()) and len(late) == 32 // ranks
    assert not torch.equal(dist.epoch_order(100, 4, 5), order)  # a new order each epoch


def test_the_trainable_rejects_an_unknown_precision_and_removed_keys() -> None:
    with pytest.raises(ConfigError, match="^trial config: precision: unknown value 'fp16'. "
                       "Hint: one of fp32, bf16"):
        images.train({"precision": "fp16"})
    with pytest.raises(ConfigError, match="^trial config: lr_scaling: removed"):
        images.train({"lr_scaling": "linear"})


TINY = {"epochs": 2, "train_size": 256, "val_size": 64, "image_size": 8, "width": 4,
        "classes": 4, "batch_size": 32}


def test_channels_last_and_bf16_train_the_same_model() -> None:
    runs = {}
    for name, extra in {"plain": {}, "channels_last": {"channels_last": True},
                        "bf16": {"precision": "bf16"}}.items():
        with local_trial() as reports:
            images.train({**TINY, **extra})
        runs[name] = [r["val_loss"] for r in reports]
        assert [r["epoch"] for r in reports] == [0, 1]
    assert runs["channels_last"] == pytest.approx(runs["plain"], rel=1e-4)
    assert runs["bf16"] == pytest.approx(runs["plain"], rel=0.05)  # bf16 rounds, but learns


def test_a_growing_batch_reports_its_batch_and_lr() -> None:
    config = {**TINY, "epochs": 3, "batch_size": 16, "lr_reference_batch": 16,
              "batch_schedule": {"max": 64, "lr_rule": "sqrt", "ramp_steps": 2}}
    with local_trial() as reports:
        images.train(config)
    assert [r["global_batch"] for r in reports] == [16, 32, 64]
    assert [r["lr"] for r in reports] == pytest.approx([0.05, 0.05 * 2 ** 0.5, 0.1])
    assert all(math.isfinite(r["train_loss"]) for r in reports)


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw", "lars", "lamb"])
def test_every_optimizer_takes_a_step(name: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    before = model.weight.detach().clone()
    optimizer = make_optimizer(name, model.parameters(), lr=0.1, nesterov=name == "sgd")
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
    assert not torch.equal(before, model.weight)
    assert type(optimizer).__name__.lower() == name


def test_one_process_is_rank_zero_of_one() -> None:
    assert (dist.backend(), dist.rank(), dist.size(), dist.is_main()) == ("none", 0, 1, True)
    assert dist.local_batch_size(96) == 96
    assert dist.allreduce_mean(2.5) == 2.5
    assert sorted(dist.shard(10, epoch=3).tolist()) == list(range(10))


@pytest.mark.parametrize("multilabel", [False, True])
def test_f1_from_summed_counts_matches_scikit_learn(multilabel: bool) -> None:
    x, y, _, _ = images.load_data("synthetic", 6, 3, 8, 300, 10, 1.0, multilabel)
    torch.manual_seed(0)
    model = images.build_model(3, 6, 8)
    metrics = images.evaluate(model, x, y, multilabel)
    logits = model(x).detach()
    predicted = (logits > 0).int() if multilabel else logits.argmax(1)
    for average in ("micro", "macro"):
        expected = f1_score(y.int() if multilabel else y, predicted, average=average,
                            zero_division=0)
        assert metrics[f"val_f1_{average}"] == pytest.approx(expected, abs=1e-9)
    assert math.isfinite(metrics["val_loss"])


def test_synthetic_multilabel_images_carry_at_least_one_label() -> None:
    _, labels = images.synthetic(12, 4, 16, 500, 1.0, multilabel=True, seed=3)
    assert labels.shape == (500, 12) and labels.sum(1).min() >= 1
    assert 1.5 < labels.sum(1).mean() < 4  # about two labels per patch, as asked


def test_doctor_reports_the_built_horovod_operations() -> None:
    done = hpo_cli("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "operations built: gloo" in done.stdout
    assert "backend: ddp" in done.stdout
