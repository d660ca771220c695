"""Broken experiment YAML, one breakage per case: every one must end in ONE readable line.

Each case starts from a valid base YAML (checked below: `hpo validate` accepts it, so the
table cannot pass vacuously), applies one breakage as text (some cases are about YAML
syntax itself) and asserts what a user sees: exit code 2, a single line on stderr naming
the file, the dotted YAML path (or `line N` for syntax errors), the bad value and a hint,
and no traceback.  Most cases run the CLI in-process (typer's CliRunner keeps stdout and
stderr apart); a handful run it as a real subprocess, including the one `hpo run` case
(a trial needing more CPUs than the machine has, only detected once the embedded Ray is
up).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hpo.cli import app

REPO = Path(__file__).resolve().parents[2]

BASE = """\
name: digits-asha
trainable: trainables.digits:train
metric: val_accuracy
mode: max
num_samples: 4
search_space:
  lr:
    loguniform: [1.0e-4, 1.0e-1]
  batch_size:
    choice: [32, 64, 128]
constants:
  epochs: 2
scheduler:
  type: asha
  max_t: 2
  grace_period: 1
search:
  type: optuna
  seed: 0
resources:
  cpus_per_trial: 1
checkpoint:
  frequency: 1
failure:
  max_failures: 0
"""

NO_RESOURCES = BASE.replace("resources:\n  cpus_per_trial: 1\n", "")
DIST = "distributed:\n  backend: horovod\n  workers: 2\n"
ASHA = "scheduler:\n  type: asha\n  max_t: 2\n  grace_period: 1\n"
RASDA = ASHA.replace("asha", "rasda")
# the built-in image trainable, a batch that splits on 1 and 2 ranks but not on 3
RASDA_IMAGES = (NO_RESOURCES.replace("trainables.digits", "trainables.images")
                .replace("  batch_size:\n    choice: [32, 64, 128]\n", "")
                .replace("  epochs: 2\n", "  epochs: 2\n  batch_size: 64\n")
                + DIST.replace("workers: 2", "workers: 1") + "  max_workers: 3\n")
LR_MUTATION = "  hyperparam_mutations:\n    lr:\n      loguniform: [1.0e-4, 1.0e-1]\n"


def sub(old: str, new: str, text: str = BASE) -> str:
    """BASE with exactly one occurrence of `old` replaced (so a typo in a case fails loudly)."""
    assert text.count(old) == 1, f"{old!r} must occur exactly once in the base YAML"
    return text.replace(old, new)


def line_of(text: str, marker: str) -> int:
    """1-based number of the (only) line containing `marker`."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if marker in line]
    assert len(hits) == 1, f"{marker!r} must occur on exactly one line"
    return hits[0]


def _hpo_command() -> list[str]:
    """`python -m hpo` when hpo/__main__.py exists, else the `hpo` script of this venv."""
    if importlib.util.find_spec("hpo.__main__") is not None:
        return [sys.executable, "-m", "hpo"]
    return [str(Path(sys.executable).with_name("hpo"))]


HPO = _hpo_command()


@dataclass(frozen=True)
class Case:
    id: str
    text: str | None  # the YAML file's content; None: no file is written (unreadable path)
    path: str | None = None  # dotted YAML path, "line N" or "--set" the line must contain
    value: str | None = None  # the bad value, as the line must show it
    extra: tuple[str, ...] = ()  # further substrings (did-you-mean, the problem in words)
    args: tuple[str, ...] = ()  # CLI arguments after the file name
    subprocess: bool = False  # run as a real process instead of in-process
    file: str = "exp.yaml"  # the file name (relative to the test's tmp dir)
    directory: bool = False  # make `file` a directory instead


def _dup_line(text: str) -> str:
    return f"line {line_of(text, 'metric: val_loss')}"


DUP_TOP = BASE + "metric: val_loss\n"
DUP_NESTED = sub("  max_t: 2\n", "  max_t: 2\n  max_t: 4\n")
BAD_INDENT = sub("  max_t: 2\n", "   max_t: 2\n")
TABS = sub("  max_t: 2\n", "\tmax_t: 2\n")
UNCLOSED_LIST = sub("choice: [32, 64, 128]", "choice: [32, 64, 128")
UNCLOSED_QUOTE = sub("metric: val_accuracy", 'metric: "val_accuracy')
COLON_IN_VALUE = sub("name: digits-asha", "name: digits: asha")

CASES = [
    # --- YAML syntax and document shape -------------------------------------------------
    Case("yaml-duplicate-top-key", DUP_TOP, _dup_line(DUP_TOP), "metric",
         ("duplicate key",), subprocess=True),
    Case("yaml-duplicate-nested-key", DUP_NESTED, f"line {line_of(DUP_NESTED, 'max_t: 4')}",
         "max_t", ("duplicate key",)),
    Case("yaml-bad-indentation", BAD_INDENT, f"line {line_of(BAD_INDENT, '   max_t')}",
         subprocess=True),
    Case("yaml-tab-indentation", TABS, f"line {line_of(TABS, chr(9))}", extra=("\\t",)),
    # reported where the list opens, not where PyYAML gives up
    Case("yaml-unclosed-flow-list", UNCLOSED_LIST,
         f"line {line_of(UNCLOSED_LIST, 'choice: [32, 64, 128')}"),
    # the quote opens on line 3; PyYAML notices only at the end of the file
    Case("yaml-unclosed-quote", UNCLOSED_QUOTE, f"line {line_of(UNCLOSED_QUOTE, 'metric:')}"),
    Case("yaml-colon-in-plain-value", COLON_IN_VALUE, "line 1"),
    Case("yaml-top-level-list", "- name: digits-asha\n- metric: val_accuracy\n",
         value="list", extra=("mapping", "`metric:` ...")),
    Case("yaml-unhashable-key", "? [a, b]\n: 1\n" + BASE, "line 1"),
    Case("yaml-top-level-scalar", "just some text\n", value="str", extra=("mapping",)),
    Case("yaml-empty-file", "", extra=("empty",)),
    Case("yaml-only-comments", "# nothing here yet\n", extra=("empty",)),
    # --- unknown keys at every level, with did-you-mean -----------------------------------
    Case("unknown-top-key", sub("num_samples: 4", "num_sample: 4"), "num_sample",
         "num_sample", ("did you mean 'num_samples'",)),
    Case("unknown-scheduler-key", sub("  grace_period: 1", "  grace_periode: 1"),
         "scheduler.grace_periode", "grace_periode", ("did you mean 'grace_period'",)),
    Case("unknown-search-key", sub("  seed: 0", "  sed: 0"), "search.sed", "sed",
         ("did you mean 'seed'",)),
    Case("search-flag-not-a-boolean", sub("  seed: 0", "  seed: 0\n  constant_liar: maybe"),
         "search.constant_liar", "maybe", ("true or false",)),
    Case("unknown-resources-key", sub("  cpus_per_trial: 1", "  cpus_per_trail: 1"),
         "resources.cpus_per_trail", "cpus_per_trail", ("did you mean 'cpus_per_trial'",)),
    Case("unknown-checkpoint-key", sub("  frequency: 1", "  frequence: 1"),
         "checkpoint.frequence", "frequence", ("did you mean 'frequency'",)),
    Case("unknown-failure-key", sub("  max_failures: 0", "  max_failure: 0"),
         "failure.max_failure", "max_failure", ("did you mean 'max_failures'",)),
    Case("unknown-distribution-kind", sub("    loguniform:", "    logunifrom:"),
         "search_space.lr.logunifrom", "logunifrom", ("did you mean 'loguniform'",)),
    # --- wrong types ----------------------------------------------------------------------
    Case("type-num-samples-text", sub("num_samples: 4", "num_samples: four"), "num_samples",
         "'four'"),
    Case("type-mode-literal", sub("mode: max", "mode: maximize"), "mode", "'maximize'",
         ("'max'", "'min'")),
    Case("type-metric-number", sub("metric: val_accuracy", "metric: 5"), "metric", "5"),
    Case("type-max-t-text", sub("  max_t: 2", "  max_t: ten"), "scheduler.max_t", "'ten'"),
    Case("type-cpus-text", sub("  cpus_per_trial: 1", "  cpus_per_trial: two"),
         "resources.cpus_per_trial", "'two'"),
    Case("type-reuse-actors-text", BASE + "reuse_actors: maybe\n", "reuse_actors", "'maybe'"),
    Case("type-search-space-list", sub("search_space:\n  lr:\n    loguniform: [1.0e-4, 1.0e-1]\n"
                                       "  batch_size:\n    choice: [32, 64, 128]\n",
                                       "search_space: [lr, batch_size]\n"),
         "search_space", "'lr'"),
    Case("type-constants-list", sub("constants:\n  epochs: 2\n", "constants: [epochs, 2]\n"),
         "constants", "'epochs'"),
    Case("type-scheduler-string", sub(ASHA, "scheduler: asha\n"), "scheduler", "'asha'"),
    Case("type-stop-value-text", BASE + "stop:\n  val_accuracy: high\n", "stop.val_accuracy",
         "'high'"),
    # --- out-of-range numbers -------------------------------------------------------------
    Case("range-num-samples-zero", sub("num_samples: 4", "num_samples: -3"), "num_samples",
         "-3"),
    Case("range-reduction-factor", sub("  grace_period: 1", "  grace_period: 1\n"
                                       "  reduction_factor: 0.5"),
         "scheduler.reduction_factor", "0.5"),
    Case("range-cpus-negative", sub("  cpus_per_trial: 1", "  cpus_per_trial: -1.5"),
         "resources.cpus_per_trial", "-1.5"),
    Case("range-max-failures", sub("  max_failures: 0", "  max_failures: -2"),
         "failure.max_failures", "-2"),
    Case("range-grace-period-over-max-t", sub("  grace_period: 1", "  grace_period: 5"),
         "scheduler.grace_period", "5", ("max_t",)),
    # --- unknown scheduler / search types -------------------------------------------------
    Case("unknown-scheduler-type", sub("  type: asha", "  type: ashaa"), "scheduler.type",
         "ashaa", ("did you mean 'asha'",)),
    Case("unknown-search-type", sub("  type: optuna", "  type: optuan"), "search.type",
         "optuan", ("did you mean 'optuna'",)),
    # --- missing required keys ------------------------------------------------------------
    Case("missing-metric", sub("metric: val_accuracy\n", ""), "metric", extra=("missing",)),
    Case("missing-mode", sub("mode: max\n", ""), "mode", extra=("missing",)),
    Case("missing-trainable", sub("trainable: trainables.digits:train\n", ""), "trainable",
         extra=("missing", "hpo.run(spec, trainable=train)")),
    Case("missing-scheduler-type", sub("  type: asha\n", ""), "scheduler.type",
         extra=("missing",)),
    # --- bad distributions ----------------------------------------------------------------
    Case("dist-low-not-below-high", sub("[1.0e-4, 1.0e-1]", "[1.0e-1, 1.0e-4]"),
         "search_space.lr.loguniform", "0.1"),
    Case("dist-log-low-not-positive", sub("[1.0e-4, 1.0e-1]", "[-1.0e-3, 1.0e-1]"),
         "search_space.lr.loguniform", "-0.001"),
    Case("dist-wrong-arity", sub("[1.0e-4, 1.0e-1]", "[1.0e-4]"),
         "search_space.lr.loguniform", "[0.0001]"),
    Case("dist-not-a-number", sub("[1.0e-4, 1.0e-1]", "[small, 1.0e-1]"),
         "search_space.lr.loguniform", "'small'"),
    Case("dist-empty-choice", sub("choice: [32, 64, 128]", "choice: []"),
         "search_space.batch_size.choice", "[]", ("{choice: [a, b, c]}",)),
    Case("dist-choice-scalar", sub("choice: [32, 64, 128]", "choice: 32"),
         "search_space.batch_size.choice", "32"),
    Case("dist-randint-floats", sub("    choice: [32, 64, 128]\n",
                                    "    choice: [32, 64, 128]\n  hidden:\n"
                                    "    randint: [16.5, 128]\n"),
         "search_space.hidden.randint", "16.5"),
    Case("dist-q-step-zero", sub("    choice: [32, 64, 128]\n",
                                 "    choice: [32, 64, 128]\n  dropout:\n"
                                 "    quniform: [0.0, 0.5, -0.1]\n"),
         "search_space.dropout.quniform", "-0.1"),
    Case("dist-plain-value", sub("  lr:\n    loguniform: [1.0e-4, 1.0e-1]\n", "  lr: 0.01\n"),
         "search_space.lr", "0.01", ("{kind: [args]}",)),
    Case("dist-two-kinds", sub("    choice: [32, 64, 128]\n",
                               "    choice: [32, 64, 128]\n    uniform: [16, 256]\n"),
         "search_space.batch_size", "uniform"),
    # --- search / space compatibility -----------------------------------------------------
    Case("grid-with-optuna", sub("choice: [32, 64, 128]", "grid: [32, 64, 128]"),
         "search_space.batch_size", "grid", ("optuna", "{choice: [...]}")),
    Case("non-grid-with-grid-search", sub("  type: optuna\n  seed: 0\n", "  type: grid\n"),
         "search_space.lr", "loguniform", ("grid",)),
    # --- population based training --------------------------------------------------------
    Case("pbt-without-mutations", sub(ASHA, "scheduler:\n  type: pbt\n"
                                            "  perturbation_interval: 1\n"),
         "scheduler.hyperparam_mutations", extra=("missing",)),
    Case("pbt-empty-mutations", sub(ASHA, "scheduler:\n  type: pbt\n"
                                          "  hyperparam_mutations: {}\n"),
         "scheduler.hyperparam_mutations", extra=("at least one",)),
    Case("pbt-grid-mutation", sub(ASHA, "scheduler:\n  type: pbt\n  hyperparam_mutations:\n"
                                        "    batch_size:\n      grid: [32, 64]\n"),
         "scheduler.hyperparam_mutations.batch_size", "grid"),
    Case("pb2-choice-mutation", sub(ASHA, "scheduler:\n  type: pb2\n  hyperparam_mutations:\n"
                                          "    batch_size:\n      choice: [32, 64]\n"),
         "scheduler.hyperparam_mutations.batch_size", "choice", ("[low, high]",)),
    Case("pbt-checkpoint-frequency-not-dividing",
         sub("  frequency: 1", "  frequency: 2",
             sub(ASHA, "scheduler:\n  type: pbt\n  perturbation_interval: 3\n" + LR_MUTATION)),
         "checkpoint.frequency", "2", ("perturbation_interval",)),
    Case("pbt-keeps-too-few-checkpoints",
         sub("  frequency: 1", "  frequency: 1\n  keep: 2",
             sub(ASHA, "scheduler:\n  type: pbt\n  perturbation_interval: 2\n" + LR_MUTATION)),
         "checkpoint.keep", "2", ("omit keep",)),
    # --- cross-key and string checks ------------------------------------------------------
    Case("constants-key-in-search-space", sub("  epochs: 2\n", "  epochs: 2\n  lr: 0.01\n"),
         "constants.lr", "lr", ("search_space",)),
    Case("bad-name", sub("name: digits-asha", "name: my experiment/1"), "name",
         "'my experiment/1'"),
    Case("bad-trainable-string", sub("trainables.digits:train", "trainables.digits.train"),
         "trainable", "'trainables.digits.train'"),
    # --- the trainable's import -----------------------------------------------------------
    Case("trainable-module-not-found", sub("trainables.digits:train", "trainables.nope:train"),
         "trainable", "trainables.nope", subprocess=True),
    Case("trainable-function-missing", sub("trainables.digits:train", "trainables.digits:trian"),
         "trainable", "trian", ("did you mean 'train'",)),
    Case("trainable-file-not-found", sub("trainables.digits:train", "no_such_dir/model.py:train"),
         "trainable", "no_such_dir/model.py", subprocess=True),
    # --- command line ---------------------------------------------------------------------
    Case("set-without-equals", BASE, "--set", "num_samples4", args=("--set", "num_samples4"),
         subprocess=True),
    Case("set-out-of-range", BASE, "scheduler.max_t", "-7", args=("--set", "scheduler.max_t=-7")),
    Case("set-into-scalar", BASE, "name.x", args=("--set", "name.x=1")),
    Case("set-bad-yaml", BASE, "scheduler.max_t", "[1", args=("--set", "scheduler.max_t=[1")),
    # the bad value is the file name itself, which every case checks
    Case("file-not-found", None, None, None, ("cannot read",), file="missing.yaml",
         subprocess=True),
    Case("file-is-a-directory", None, None, None, ("cannot read",), file="a_dir.yaml",
         directory=True),
    # text that looks like console markup must be printed as is
    Case("file-name-with-brackets", sub("mode: max", "mode: maximize"), "mode", "'maximize'",
         file="exp[v2].yaml"),
    Case("value-with-brackets", sub("name: digits-asha", "name: '[bold]x'"), "name",
         "'[bold]x'"),
    # --- distributed: data-parallel trials ---------------------------------------------
    Case("distributed-unknown-backend", NO_RESOURCES + DIST.replace("horovod", "hovorod"),
         "distributed.backend", "'hovorod'", ("horovod",)),
    Case("distributed-unknown-key", NO_RESOURCES + DIST + "  worker: 2\n",
         "distributed.worker", extra=("did you mean 'workers'",)),
    Case("distributed-zero-workers", NO_RESOURCES + DIST.replace("workers: 2", "workers: 0"),
         "distributed.workers", "0"),
    Case("distributed-workers-missing", NO_RESOURCES + DIST.replace("  workers: 2\n", ""),
         "distributed.workers", extra=("missing",)),
    Case("distributed-with-resources", BASE + DIST, "resources", extra=("distributed",)),
    Case("distributed-env-not-text", NO_RESOURCES + DIST + "  env: {A: [1]}\n",
         "distributed.env.A"),
    # --- GPUs: every rank owns a whole device; only one-process trials share one ----------
    Case("ranks-sharing-a-gpu", NO_RESOURCES + DIST + "  gpus_per_worker: 0.5\n",
         "distributed.gpus_per_worker", "0.5", ("share a GPU",)),
    Case("rank-gpus-fraction-above-one", NO_RESOURCES + DIST + "  gpus_per_worker: 1.5\n",
         "distributed.gpus_per_worker", "1.5", ("whole GPUs",)),
    Case("trial-gpus-fraction-above-one", sub("cpus_per_trial: 1", "cpus_per_trial: 1\n  "
                                              "gpus_per_trial: 2.5"),
         "resources.gpus_per_trial", "2.5", ("whole GPUs",)),
    # --- rasda: trials that grow their ranks at each rung ---------------------------------
    Case("rasda-without-ranks", sub(ASHA, RASDA), "scheduler.type", "rasda",
         ("no distributed section",)),
    Case("rasda-without-max-workers", sub(ASHA, RASDA, NO_RESOURCES + DIST),
         "distributed.max_workers", extra=("grow to",)),
    Case("rasda-max-below-workers", sub(ASHA, RASDA, NO_RESOURCES + DIST
                                        + "  max_workers: 1\n"),
         "distributed.max_workers", "1 < 2"),
    Case("max-workers-without-rasda", NO_RESOURCES + DIST + "  max_workers: 4\n",
         "distributed.max_workers", "asha", ("rasda",)),
    Case("rasda-grown-batch-odd-step", sub(ASHA, RASDA + "  batch: grows\n",
                                           NO_RESOURCES + DIST + "  max_workers: 6\n"),
         "distributed.max_workers", "6", ("growth_factor=2",)),
    Case("rasda-unknown-batch-mode", sub(ASHA, RASDA + "  batch: doubles\n",
                                         NO_RESOURCES + DIST + "  max_workers: 4\n"),
         "scheduler.batch", "doubles"),
    Case("rasda-rung-without-checkpoint", sub("  frequency: 1\n", "  frequency: 0\n", sub(
        ASHA, RASDA, NO_RESOURCES + DIST + "  max_workers: 4\n")),
         "checkpoint.frequency", "got 0", ("rung",)),
    Case("rasda-beyond-the-job", sub(ASHA, RASDA, NO_RESOURCES + DIST
                                     + "  max_workers: 16\n  gpus_per_worker: 1\n")
         + "slurm:\n  nodes: 2\n  gpus_per_node: 4\n",
         "distributed.max_workers", "16 GPUs", ("2 node(s) x 4",)),
    Case("rasda-batch-split-on-grown-ranks", sub(ASHA, RASDA, RASDA_IMAGES),
         "constants.batch_size", "64", ("3 ranks",)),
    # a search that cannot rank trials for promotion: nothing would be paused to grow
    Case("rasda-several-metrics", sub(ASHA, RASDA, NO_RESOURCES + DIST
                                      + "  max_workers: 4\n").replace(
        "metric: val_accuracy\nmode: max", "metric: [val_accuracy, cost]\nmode: [max, min]"),
         "scheduler.type", "rasda", ("several metrics",)),
    # --- the large-batch keys of the built-in trainables: one meaning on any rank count --
    Case("removed-lr-scaling", sub("  epochs: 2\n", "  epochs: 2\n  lr_scaling: linear\n",
                                   BASE.replace("trainables.digits", "trainables.images")),
         "constants.lr_scaling", "'linear'", ("lr_reference_batch",)),
    Case("batch-schedule-typo", sub("  epochs: 2\n", "  epochs: 2\n  batch_schedule: "
                                    "{dubble_every: 2}\n"),
         "constants.batch_schedule.dubble_every", extra=("did you mean 'double_every'",)),
    Case("searched-decay-unknown", BASE.replace(
        "  batch_size:\n", "  batch_schedule.decay:\n    choice: [poly, cosin]\n  batch_size:\n"),
         "search_space.batch_schedule.decay", "'cosin'", ("did you mean 'cosine'",)),
    Case("searched-switch-beside-doublings", sub("  epochs: 2\n", "  epochs: 2\n  "
                                                 "batch_schedule: {double_every: 2}\n",
                                                 BASE.replace("  batch_size:\n",
                                                 "  batch_schedule.switch_at:\n    randint: "
                                                 "[1, 4]\n  batch_size:\n")),
         "search_space.batch_schedule.switch_at", "switches the batch once",
         ("give one of",)),
    Case("noise-growth-under-horovod", sub("  epochs: 2\n", "  epochs: 2\n  batch_schedule: "
                                           "{grow: noise}\n", NO_RESOURCES + DIST),
         "distributed.backend", "horovod", ("DDP's gradient buckets", "backend: ddp")),
    Case("noise-growth-on-one-process", sub("  epochs: 2\n", "  epochs: 2\n  batch_schedule: "
                                            "{grow: noise}\n"),
         "constants.batch_schedule.grow", "noise", ("distributed.workers >= 2",)),
    Case("class-trainable-on-ranks", sub("trainable: trainables.digits:train",
                                         "trainable: ray.tune.utils.mock_trainable:"
                                         "MyTrainableClass", NO_RESOURCES + DIST),
         "distributed", "MyTrainableClass", ("one-process trial",)),
    Case("rank-more-gpus-than-a-node", NO_RESOURCES + DIST + "  gpus_per_worker: 8\n"
         "slurm:\n  gpus_per_node: 4\n", "distributed.gpus_per_worker", "8",
         ("a node has 4",)),
    # --- warm start and tracking ---------------------------------------------------------
    Case("point-outside-the-space", sub("  seed: 0\n", "  seed: 0\n  points_to_evaluate:\n"
                                        "    - {lr: 0.01}\n    - {lr: 5}\n"),
         "search.points_to_evaluate[1].lr", "5", ("outside loguniform [0.0001, 0.1]",)),
    Case("point-not-a-choice", sub("  seed: 0\n", "  seed: 0\n  points_to_evaluate:\n"
                                   "    - {batch_size: 48}\n"),
         "search.points_to_evaluate[0].batch_size", "48", ("not one of choice",)),
    Case("point-unknown-key", sub("  seed: 0\n", "  seed: 0\n  points_to_evaluate:\n"
                                  "    - {learning_rate: 0.01}\n"),
         "search.points_to_evaluate[0].learning_rate", "learning_rate", ("not in search_space",)),
    Case("more-points-than-samples", sub("  seed: 0\n", "  seed: 0\n  points_to_evaluate:\n"
                                         + "    - {lr: 0.01}\n" * 5),
         "search.points_to_evaluate", "5 points", ("num_samples is 4",)),
    Case("warm-start-needs-optuna", sub("  type: optuna\n  seed: 0\n",
                                        "  type: random\n  warm_start: old/exp\n"),
         "search.warm_start", "random", ("search.type: optuna",)),
    Case("tracking-unknown-key", BASE + "tracking:\n  mlflow:\n    tracking_url: x\n",
         "tracking.mlflow.tracking_url", "tracking_url", ("did you mean 'tracking_uri'",)),
    Case("wandb-bad-mode", BASE + "tracking:\n  wandb:\n    mode: offlne\n",
         "tracking.wandb.mode", "offlne"),
]


def _invoke(args: list[str], in_subprocess: bool) -> tuple[int, str, str]:
    if in_subprocess:
        proc = subprocess.run([*HPO, *args], cwd=REPO, capture_output=True, text=True,
                              timeout=300)
        return proc.returncode, proc.stdout, proc.stderr
    result = CliRunner().invoke(app, args)
    # An exception other than the Exit the CLI raises on purpose means the CLI crashed
    # (CliRunner swallows it, so there would be no traceback on stderr to catch).
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"CLI crashed: {result.exception!r}")
    return result.exit_code, result.stdout, result.stderr


def _check_one_line_error(code: int, stdout: str, stderr: str, source: str, case: Case) -> str:
    assert "Traceback" not in stdout + stderr, stdout + stderr
    line = stderr.strip()
    assert code == 2, f"exit code {code}; stderr: {stderr!r}"
    assert "\n" not in line, f"expected one line on stderr, got:\n{stderr}"
    assert source in line, f"file name {source!r} missing from: {line}"
    rest = line.replace(source, "<file>")  # the tmp path holds the case id: check the rest
    if case.path is not None:
        assert case.path in rest, f"path {case.path!r} missing from: {line}"
    if case.value is not None:
        assert case.value in rest, f"bad value {case.value!r} missing from: {line}"
    for text in case.extra:
        assert text in rest, f"{text!r} missing from: {line}"
    assert "Hint:" in rest, f"no 'Hint:' in: {line}"
    return line


def _write(case: Case, tmp_path: Path) -> Path:
    target = tmp_path / case.file
    if case.directory:
        target.mkdir()
    elif case.text is not None:
        target.write_text(case.text)
    return target


def test_cases_are_many_and_distinct() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 40
    assert sum(c.subprocess for c in CASES) >= 5


def test_base_yaml_is_valid(tmp_path: Path) -> None:
    spec = tmp_path / "exp.yaml"
    spec.write_text(BASE)
    result = CliRunner().invoke(app, ["validate", str(spec)])
    assert result.exit_code == 0, result.output
    assert f"{spec}: OK" in result.stdout


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path) -> None:
    target = _write(case, tmp_path)
    code, stdout, stderr = _invoke(["validate", str(target), *case.args], case.subprocess)
    _check_one_line_error(code, stdout, stderr, str(target), case)


def test_debug_shows_traceback(tmp_path: Path) -> None:
    target = tmp_path / "exp.yaml"
    target.write_text(sub("trainables.digits:train", "trainables.nope:train"))
    proc = subprocess.run([*HPO, "--debug", "validate", str(target)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert str(target) in last and "trainable" in last and "Hint:" in last


@pytest.mark.ray
def test_run_cpus_per_trial_beyond_machine(tmp_path: Path) -> None:
    """Only `hpo run` can tell (the embedded Ray reports the CPUs): one line, no trials."""
    target = tmp_path / "exp.yaml"
    target.write_text(sub("  cpus_per_trial: 1", "  cpus_per_trial: 4096"))
    storage = tmp_path / "results"
    case = Case("run-cpus", None, "resources.cpus_per_trial", "4096")
    proc = subprocess.run([*HPO, "run", str(target), "--storage", str(storage),
                           "--name", "too-big"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    _check_one_line_error(proc.returncode, proc.stdout, proc.stderr, str(target), case)
    exp_dir = storage / "too-big"
    leftovers = [p.name for p in exp_dir.iterdir()] if exp_dir.exists() else []
    assert not [n for n in leftovers if (exp_dir / n).is_dir()], f"trial folders: {leftovers}"
    assert "hpo-spec.yaml" not in leftovers, leftovers


def test_run_missing_trainable_starts_nothing(tmp_path: Path) -> None:
    """`hpo run` imports the trainable while Ray starts; a name that does not exist is caught
    before that, so no experiment folder (and no Ray) comes into being."""
    target = tmp_path / "exp.yaml"
    target.write_text(sub("trainables.digits:train", "trainables.nope:train"))
    storage = tmp_path / "results"
    case = Case("run-missing-trainable", None, "trainable", "trainables.nope")
    proc = subprocess.run([*HPO, "run", str(target), "--storage", str(storage)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    _check_one_line_error(proc.returncode, proc.stdout, proc.stderr, str(target), case)
    assert not storage.exists(), list(storage.rglob("*"))


def test_fractional_gpus_still_pack_one_process_trials(tmp_path: Path) -> None:
    """Sharing a GPU stays allowed where it works: one-process trials with a fraction."""
    space = tmp_path / "packed.yaml"
    space.write_text(sub("cpus_per_trial: 1", "cpus_per_trial: 1\n  gpus_per_trial: 0.25"))
    code, stdout, stderr = _invoke(["validate", str(space)], in_subprocess=False)
    assert code == 0, stderr
    assert "0.25 GPU per trial" in stdout


@pytest.mark.parametrize(("section", "nodes", "refused"), [
    ({"distributed": {"backend": "ddp", "workers": 4, "gpus_per_worker": 2}},
     [{"CPU": 8, "GPU": 4}, {"CPU": 8, "GPU": 4}], False),
    ({"distributed": {"backend": "ddp", "workers": 2, "gpus_per_worker": 2}},
     [{"CPU": 8, "GPU": 1}, {"CPU": 8, "GPU": 1}], True),  # 2 GPUs in all, none per rank
    ({"resources": {"cpus_per_trial": 3}}, [{"CPU": 2}, {"CPU": 2}], True),
    ({"resources": {"cpus_per_trial": 2, "gpus_per_trial": 0.5}}, [{"CPU": 2, "GPU": 1}],
     False),
])
def test_a_rank_or_trial_must_fit_on_one_node(section: dict, nodes: list[dict],
                                              refused: bool) -> None:
    from hpo.driver.run.preflight import check_node_fits
    from hpo.errors import ConfigError
    from hpo.spec import spec_from_dict

    spec = spec_from_dict({"name": "x", "trainable": "m:f", "metric": "a", "mode": "max",
                           **section})
    if refused:
        with pytest.raises(ConfigError, match="the biggest node has"):
            check_node_fits(spec, "x.yaml", nodes)
    else:
        check_node_fits(spec, "x.yaml", nodes)


@pytest.mark.parametrize(("searched", "refused"), [
    ("{quniform: [100, 1000, 64]}", False),  # Ray rounds the low end to 128: splits over 8
    ("{qrandint: [100, 1000, 50]}", True),   # 100 can be drawn: does not split over 8
])
def test_a_searched_q_range_is_checked_at_its_lowest_draw(tmp_path: Path, searched: str,
                                                          refused: bool) -> None:
    space = tmp_path / "exp.yaml"
    images = (NO_RESOURCES.replace("trainables.digits", "trainables.images")
              .replace("    choice: [32, 64, 128]\n", f"    {searched}\n"))
    space.write_text(images + "distributed:\n  backend: ddp\n  workers: 8\n")
    result = CliRunner().invoke(app, ["validate", str(space)])
    if refused:
        assert result.exit_code == 2 and "search_space.batch_size: global batch 100" in (
            result.output), result.output
    else:
        assert result.exit_code == 0, result.output


def test_an_object_in_constants_is_one_config_error_from_python(tmp_path: Path) -> None:
    """A NumPy array in `constants` (only Python can put one there) is refused with its key
    and where such objects go, before anything starts: a raw pydantic serialization error
    and an empty experiment folder before."""
    import numpy as np

    import hpo

    spec = {"name": "objs", "metric": "a", "mode": "max", "storage": str(tmp_path),
            "search_space": {"x": {"grid": [1]}}, "constants": {"data": {"train": [np.ones(3)]}}}
    with pytest.raises(hpo.ConfigError, match=r"constants\.data: a numpy\.ndarray cannot go "
                       r"into the experiment's YAML\. Hint: pass arrays.*parameters="):
        hpo.run(spec, trainable=lambda config: None)
    # a key too (class weights keyed by np.unique(labels)), found before anything starts
    spec["constants"] = {"weights": {np.int64(1): 0.5}}
    with pytest.raises(hpo.ConfigError, match=r"constants\.weights: a numpy\.int64 .*Hint: "
                       r"make it a plain number"):
        hpo.run(spec, trainable=lambda config: None)
    assert not (tmp_path / "objs").exists()


@pytest.mark.parametrize("parameters", [[1, 2], {1: "not a name"}])
def test_parameters_that_are_no_keyword_mapping_are_one_config_error(
        tmp_path: Path, parameters: object) -> None:
    """`parameters=` from Python must map keyword names to objects: one line naming it,
    before anything starts (a raw TypeError from deep in the run before)."""
    import hpo

    spec = {"name": "params", "metric": "a", "mode": "max", "storage": str(tmp_path),
            "search_space": {"x": {"grid": [1]}}}
    with pytest.raises(hpo.ConfigError, match=r"parameters: must map keyword names to "
                       r"objects .*Hint: e\.g\. hpo\.run"):
        hpo.run(spec, trainable=lambda config, **objects: None, parameters=parameters)
    assert not (tmp_path / "params").exists()


@pytest.mark.parametrize("num_cpus", [0, -2, 1.5, True])
def test_num_cpus_below_one_or_not_whole_is_one_config_error(tmp_path: Path,
                                                             num_cpus: object) -> None:
    """`num_cpus=0` was blamed on resources.cpus_per_trial, after Ray had started."""
    import hpo

    spec = {"name": "cpus", "metric": "a", "mode": "max", "storage": str(tmp_path),
            "search_space": {"x": {"grid": [1]}}}
    with pytest.raises(hpo.ConfigError, match=r"num_cpus: must be a whole number of at least "
                       r"1 \(got .*\)\. Hint: leave it out"):
        hpo.run(spec, trainable=lambda config: None, num_cpus=num_cpus)  # type: ignore[arg-type]
    assert not (tmp_path / "cpus").exists()


def test_a_trainable_that_cannot_take_the_config_is_refused_by_validate(tmp_path: Path) -> None:
    """Tune found it in the driver, after Ray had started: a 69-line traceback, and a folder
    that blocked the next run."""
    (tmp_path / "noarg.py").write_text("def train():\n    pass\n")
    space = tmp_path / "space.yaml"
    space.write_text(f"name: n\ntrainable: {tmp_path}/noarg.py:train\nmetric: a\nmode: max\n"
                     "search_space: {x: {grid: [1]}}\n")
    done = CliRunner().invoke(app, ["validate", str(space)])
    assert done.exit_code == 2
    assert "trainable: train() cannot be called as train(config) (too many positional " \
        "arguments). Hint: take the trial's config as the one positional argument" in done.output
    assert "Traceback" not in done.output


@pytest.mark.parametrize("bounds", ["{loguniform: [1.0e-4, .inf]}", "{uniform: [.nan, 1]}",
                                    "{randint: [0, .inf]}"])
def test_a_search_range_that_is_not_finite_is_one_config_error(bounds: str) -> None:
    from hpo.errors import ConfigError
    from hpo.spec.load import spec_from_dict

    with pytest.raises(ConfigError, match=r"search_space\.x\.\w+: expected finite numbers, "
                       r"got (inf|nan)\. Hint: give the range finite bounds"):
        spec_from_dict({"name": "n", "trainable": "t.py:f", "metric": "a", "mode": "max",
                        "search_space": {"x": yaml.safe_load(bounds)}}, "<dict>")


@pytest.mark.parametrize("root", ["a-file", "/proc/hpo-storage"])
def test_a_storage_that_cannot_hold_the_folder_is_one_storage_error(tmp_path: Path,
                                                                    root: str) -> None:
    """A file in the way, or a root nobody can write: raw NotADirectoryError and
    FileNotFoundError tracebacks (exit 1) before."""
    import hpo

    (tmp_path / "a-file").touch()
    storage = tmp_path / root if root == "a-file" else Path(root)
    spec = {"name": "s", "metric": "a", "mode": "max", "search_space": {"x": {"grid": [1]}}}
    with pytest.raises(hpo.StorageError, match=r"/s: the experiment folder cannot be made "
                       r"here \(.*\)\. Hint: storage \(--storage\) must name a folder you "
                       r"can write") as caught:
        hpo.run(spec, trainable=lambda config: None, storage=str(storage))
    assert caught.value.exit_code == 4


@pytest.mark.parametrize("text", ["", "name: x\nmetric: [a\n", "- a list\n"])
@pytest.mark.parametrize("command", ["results", "best", "report"])
def test_a_damaged_saved_spec_is_one_line(tmp_path: Path, text: str, command: str) -> None:
    import hpo

    (tmp_path / "hpo-spec.yaml").write_text(text)
    done = CliRunner().invoke(app, [command, str(tmp_path)])
    assert done.exit_code == 2, done.output
    assert "hpo-spec.yaml: damaged, not the spec `hpo run` wrote" in done.output
    assert "Traceback" not in done.output
    with pytest.raises(hpo.ExperimentError, match="damaged"):  # what `hpo resume` calls
        hpo.resume(tmp_path, keep_ray=False)


@pytest.mark.parametrize(("module", "said"), [
    ("train = 5\n", "'train' is not a function (it is 5). Hint: define def train(config)"),
    ("x = 1\n", "has no function 'train'. Hint: define def train(config)"),
])
def test_a_file_without_the_function_says_what_to_define(tmp_path: Path, module: str,
                                                         said: str) -> None:
    """It said "Hint: valid: " with nothing after it."""
    (tmp_path / "mod.py").write_text(module)
    space = tmp_path / "space.yaml"
    space.write_text(f"name: n\ntrainable: {tmp_path}/mod.py:train\nmetric: a\nmode: max\n"
                     "search_space: {x: {grid: [1]}}\n")
    done = CliRunner().invoke(app, ["validate", str(space)])
    assert done.exit_code == 2 and said in done.output, done.output


@pytest.mark.parametrize("limit", [".nan", "true"])
def test_a_stop_that_is_no_number_is_one_config_error(limit: str) -> None:
    """NaN compares false, so the run never stopped; true stopped at 1."""
    from hpo.errors import ConfigError
    from hpo.spec.load import spec_from_dict

    with pytest.raises(ConfigError, match=r"stop\.loss: expected a number, got (nan|True)"):
        spec_from_dict({"name": "n", "trainable": "t.py:f", "metric": "loss", "mode": "min",
                        "search_space": {"x": {"grid": [1]}},
                        "stop": {"loss": yaml.safe_load(limit)}}, "<dict>")
