"""Large-batch helpers and the built-in image trainable's pieces, on one process."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import f1_score

from hpo import dist
from hpo.large_batch import BatchSchedule, make_optimizer, scaled_lr, warmup_lr
from tests.conftest import hpo_cli
from trainables import images


@pytest.mark.parametrize(("rule", "expected"), [("linear", 0.4), ("sqrt", 0.2), ("none", 0.1)])
def test_lr_scales_with_the_ranks(rule: str, expected: float) -> None:
    assert scaled_lr(0.1, 4, rule) == pytest.approx(expected)


def test_unknown_scaling_rule_is_named() -> None:
    with pytest.raises(ValueError, match="lr_scaling must be one of linear, sqrt, none"):
        scaled_lr(0.1, 2, "square")


def test_warmup_ramps_linearly_then_holds() -> None:
    assert [warmup_lr(0.8, 0.1, e, 2) for e in (0, 1, 2, 5)] == pytest.approx([0.1, 0.45, 0.8, 0.8])
    assert warmup_lr(0.8, 0.1, 0, 0) == 0.8


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


def test_batch_schedule_jumps_once() -> None:
    schedule = BatchSchedule.from_config({"batch_size": 512, "big_batch_size": 16384,
                                          "big_batch_from_epoch": 20})
    assert [schedule.global_batch(e) for e in (0, 19, 20, 50)] == [512, 512, 16384, 16384]
    assert BatchSchedule.from_config({"batch_size": 64}).global_batch(99) == 64
    assert [schedule.lr(0.1, e) for e in (0, 20)] == [0.1, 0.1]  # bigger batch, same LR
    sqrt = BatchSchedule.from_config({"batch_size": 512, "big_batch_size": 2048,
                                      "big_batch_lr_scaling": "sqrt"})
    # x sqrt(4) after the jump, ramped in over one epoch
    assert [sqrt.lr(0.1, e) for e in (0, 0.5, 1, 3)] == pytest.approx([0.1, 0.15, 0.2, 0.2])


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
