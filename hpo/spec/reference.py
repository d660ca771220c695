"""Every key of the experiment YAML as Markdown, generated from the spec's models.

docs/spec.md holds the reference between `<!-- generated: keys -->` markers:

    python -m hpo.spec.reference --write docs/spec.md   # regenerate the page's section
    python -m hpo.spec.reference --check docs/spec.md   # exit 1 when the page is out of date
    python -m hpo.spec.reference                        # print the section

A key's meaning is read from its model: the field's `description=`, else the `# comment` on
the field's line or in the comment lines just above it. `MEANINGS` (by YAML path) goes before
that where the source says too little or nothing; a key with no meaning at all fails the
generator, naming it (and so does an entry of `MEANINGS` that names no key).
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import io
import re
import sys
import textwrap
import tokenize
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from hpo.spec._validation import Strict
from hpo.spec.distributions import KINDS, Distribution
from hpo.spec.model import Spec

COMMAND = "python -m hpo.spec.reference --write docs/spec.md"
NAME = "NAME"  # the placeholder of a mapping's own keys: slurm.partitions.NAME.max_time

#: Meanings by YAML path, before the model's own comment (where it has one).
MEANINGS: dict[str, str] = {
    "name": "The experiment's folder: `<storage>/<name>`; also the default MLflow experiment "
            "and W&B project.",
    "trainable": "What each trial runs: `package.module:function`, `path/to/file.py:function` "
                 "or a Ray Tune Trainable class by the same forms.",
    "metric": "The reported metric that ranks trials (a key of the dict passed to "
              "`hpo.report`).",
    "mode": "Whether a higher (`max`) or lower (`min`) metric is better; one per metric.",
    "num_samples": "Trials to run (with `grid` entries: samples, each crossed with the "
                   "whole grid).",
    "max_concurrent": "The most trials running at once; null: as many as the resources fit.",
    "search_space": "The hyperparameters to search, each a distribution (below); a trial "
                    "gets its drawn values in `config`.",
    "constants": "Fixed values merged into every trial's `config` (a key may not also be in "
                 "`search_space`).",
    "scheduler": "Which trials to stop early, pause or perturb (below).",
    "search": "How trials' configurations are drawn (below).",
    "resources": "What one trial takes (one-process trials).",
    "distributed": "Data-parallel trials on several ranks (below); null: one process per "
                   "trial.",
    "stop": "Stop a trial once a reported metric reaches a value, e.g. "
            "`{training_iteration: 20}`.",
    "time_budget_s": "Stop the whole experiment after this many seconds; null: no limit.",
    "checkpoint": "Which checkpoints hpo keeps (below).",
    "failure": "Retries of failed trials (below).",
    "storage": "The results root: the experiment folder is `<storage>/<name>`.",
    "slurm": "The allocation `hpo slurm render`/`submit` asks for (below).",
    "tracking": "Experiment trackers (below).",
    "scheduler.time_attr": "The time axis that `max_t`, `grace_period` and "
                           "`perturbation_interval` count: reports or seconds.",
    "scheduler.max_t": "A trial's last rung: the most iterations (or seconds) it runs.",
    "scheduler.grace_period": "Time a trial runs before it can be stopped.",
    "scheduler.reduction_factor": "One in this many trials is promoted at each rung.",
    "scheduler.brackets": "ASHA brackets; more brackets judge trials later.",
    "scheduler.stop_last_trials": "Stop the trials that reach `max_t` (false: they run on).",
    "scheduler.growth_factor": "A promoted trial's ranks are multiplied by this at each rung.",
    "scheduler.batch": "`fixed`: the global batch stays; `grows`: it grows with the ranks.",
    "scheduler.min_samples_required": "Trials that must have reported before one is judged.",
    "scheduler.min_time_slice": "The least time a trial runs each time it is scheduled.",
    "scheduler.hard_stop": "Stop a trial below the median (false: pause it).",
    "scheduler.perturbation_interval": "Time between perturbations (a multiple of "
                                       "`checkpoint.frequency`).",
    "scheduler.burn_in_period": "No perturbation before this time.",
    "scheduler.hyperparam_mutations": "The hyperparameters to perturb, each a distribution "
                                      "(below); PB2 needs `uniform`/`loguniform` bounds.",
    "scheduler.quantile_fraction": "The bottom fraction of trials that clone the top one.",
    "scheduler.resample_probability": "The chance that a perturbed value is drawn afresh "
                                      "from its distribution instead.",
    "scheduler.perturbation_factors": "A perturbed number is multiplied by one of these.",
    "scheduler.synch": "Perturb all trials together at each interval (slower; false: as "
                       "each reaches it).",
    "search.seed": "Seeds the sampler.",
    "search.sampler": "Optuna's sampler: TPE, or NSGA-II for several objectives.",
    "search.n_startup_trials": "TPE: random trials before the model proposes.",
    "search.multivariate": "TPE: model the hyperparameters jointly.",
    "resources.cpus_per_trial": "CPUs per trial.",
    "resources.gpus_per_trial": "GPUs per trial.",
    "distributed.backend": "The ranks' communication: Horovod or torch DDP.",
    "distributed.workers": "Ranks per trial (at its start, under `rasda`).",
    "distributed.cpus_per_worker": "CPUs per rank.",
    "distributed.gpus_per_worker": "GPUs per rank: 0 or whole GPUs.",
    "slurm.nodes": "Nodes of the job, one Ray node each.",
    "slurm.gpus_per_node": "GPUs asked for per node.",
    "slurm.time": "The job's time limit (Slurm's `--time`).",
    "slurm.partition": "Slurm partition; null: the site's or the cluster's default.",
    "slurm.account": "Slurm account to charge; null: your default.",
    "slurm.startup_timeout_s": "How long every node has to join Ray before the job fails, "
                               "naming those that did not.",
    "slurm.node_cores": "CPU cores one node has.",
    "tracking.mlflow": "Log each trial as an MLflow run; null: no MLflow.",
    "tracking.wandb": "Log each trial as a W&B run; null: no W&B.",
    "slurm.cpus_per_node": "CPUs asked for per node (the `--cpus-per-task` of its one task).",
    "slurm.requeue": "Requeue the job when its time runs out.",
    "slurm.signal_seconds": "The warning before the time limit, to stop and save.",
    "slurm.env": "Environment variables.",
    "slurm.dashboard": "Start Ray's dashboard.",
    "slurm.workdir": "The folder the job runs in.",
    "slurm.job_dir": "Where jobs keep their files.",
    "slurm.node_gpus": "GPUs one node has.",
    "slurm.cpus_per_gpu": "CPUs to ask for with each GPU.",
    "slurm.gpu_option": "How the job asks for GPUs: `--gpus-per-node=N`.",
    "slurm.hostname_suffix": "Appended to a node's name for its address.",
    "distributed.env": "Environment variables of the rank processes.",
    "tracking.mlflow.tracking_uri": "Where MLflow keeps the runs, e.g. `sqlite:///mlflow.db`.",
    "tracking.mlflow.experiment_name": "The MLflow experiment.",
    "tracking.mlflow.tags": "Tags set on every run.",
    "tracking.wandb.project": "The W&B project.",
    "tracking.wandb.group": "The W&B group of the runs.",
    "tracking.wandb.mode": "`online`: runs go to W&B as they go; `offline`: written locally "
                           "for `wandb sync`.",
}
#: What each distribution draws (KINDS in hpo.spec.distributions), by YAML name.
KIND_MEANINGS: dict[str, str] = {
    "uniform": "a float, uniform between low and high",
    "quniform": "`uniform` rounded to a multiple of q",
    "loguniform": "a float, uniform on a log scale",
    "qloguniform": "`loguniform` rounded to a multiple of q",
    "randint": "an integer from low up to high, high excluded",
    "qrandint": "an integer from low to high, a multiple of q, high included",
    "lograndint": "an integer on a log scale, high excluded",
    "qlograndint": "an integer on a log scale, a multiple of q, high included",
    "randn": "a float from a normal distribution",
    "qrandn": "`randn` rounded to a multiple of q",
    "choice": "one of the values, drawn at random (Optuna: categorical)",
    "grid": "every value in turn: each sample runs once with each (`num_samples` x values "
            "trials); not with `search.type: optuna`",
}


class ReferenceGap(ValueError):
    """Keys or commands the generated reference cannot say anything about."""

    def __init__(self, missing: Sequence[str], hint: str) -> None:
        super().__init__(f"no meaning for: {', '.join(missing)}. Hint: {hint}")
        self.missing = list(missing)


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    meaning: str


@dataclass(frozen=True)
class Section:
    """One model's keys: the top level, a nested mapping, or one variant of a union."""

    path: str
    model: type[BaseModel]
    tag: str | None = None  # the variant's `type:`

    @property
    def title(self) -> str:
        if not self.path:
            return "Top level"
        return f"{self.path}: {self.tag}" if self.tag else self.path


# -- reading the models -------------------------------------------------------------------

def sections(model: type[BaseModel] = Spec, path: str = "") -> list[Section]:
    """The model's section and, depth first, those of every model nested in its fields."""
    found = [Section(path, model, _tag(model))]
    for name, field in model.model_fields.items():
        for child, child_path in _nested(field.annotation, _join(path, name)):
            found += sections(child, child_path)
    return found


def _nested(annotation: Any, path: str) -> Iterator[tuple[type[BaseModel], str]]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType, list, Annotated):
        for arg in args[:1] if origin is Annotated else args:
            yield from _nested(arg, path)
    elif origin is dict:
        yield from _nested(args[1], f"{path}.{NAME}")
    elif isinstance(annotation, type) and issubclass(annotation, Strict):
        yield annotation, path


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _tag(model: type[BaseModel]) -> str | None:
    """The `type:` a union variant is picked by (None for a plain mapping)."""
    field = model.model_fields.get("type")
    if field is None or get_origin(field.annotation) is not Literal:
        return None
    return str(get_args(field.annotation)[0])


def _own_doc(model: type) -> str:
    doc = model.__dict__.get("__doc__")
    return " ".join(inspect.cleandoc(doc).split()) if doc else ""


@functools.cache
def source_comments(model: type) -> dict[str, str]:
    """Field name -> its `# comment`: the comment lines just above the field, then the one
    on its line(s); fields without one are left out."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):  # a model with no source file
        return {}
    lines, comments = source.splitlines(), _comments(source)
    found = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            text = _field_comment(node, lines, comments)
            if text:
                found[node.target.id] = text
    return found


def _comments(source: str) -> dict[int, str]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    found = {t.start[0]: t.string.lstrip("#").strip() for t in tokens
             if t.type == tokenize.COMMENT}
    return {line: text for line, text in found.items()
            if not re.match(r"(type:|noqa|pragma)", text)}


def _field_comment(node: ast.AnnAssign, lines: list[str], comments: dict[int, str]) -> str:
    above, line = [], node.lineno - 1
    while line in comments and lines[line - 1].lstrip().startswith("#"):
        above.insert(0, comments[line])
        line -= 1
    own = [comments[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
           if n in comments]
    return " ".join(above + own)


def _defining_class(model: type[BaseModel], name: str) -> type:
    """The class (the model or a base) whose body declares the field."""
    return next(klass for klass in model.__mro__
                if name in inspect.get_annotations(klass))


def meaning(section: Section, name: str) -> str:
    """MEANINGS' entry for the key's path, then the field's description or comment."""
    if name == "type" and section.tag:
        return f"Picks this one: `type: {section.tag}`."
    field = section.model.model_fields[name]
    own = field.description or source_comments(_defining_class(section.model, name)).get(name)
    return joined(MEANINGS.get(_join(section.path, name), ""), own or "")


def joined(entry: str, own: str) -> str:
    """One sentence or two: a comment that goes on in lower case follows after `;`."""
    if entry and own:
        text = f"{entry.rstrip('.')}; {own}" if own[0].islower() else f"{entry} {own}"
    else:
        text = entry or own
    if text.split(":")[0].split(" ")[0] not in ("null", "true", "false"):
        text = text[:1].upper() + text[1:]
    return text if not text or text.endswith(".") else f"{text}."


# -- rendering a key ----------------------------------------------------------------------

_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
_NAMES = {int: "int", float: "float", bool: "bool", str: "str", Any: "any",
          type(None): "null", Distribution: "distribution"}


def type_text(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """A YAML reader's name for a field's type, e.g. `int > 0 or null`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_text(args[0], annotation.__metadata__)
    if origin in (Union, types.UnionType):
        return " or ".join(dict.fromkeys(type_text(arg) for arg in args))
    if origin is Literal:
        return " or ".join(f"`{value}`" for value in args)
    if origin is list:
        return f"list of {_inner(args[0])}"
    if origin is tuple:
        return f"list of {len(args)} {_inner(args[0])}"
    if origin is dict:
        return f"mapping of {type_text(args[0])} to {_inner(args[1])}"
    if origin is Callable:
        return "Python callable (from `hpo.run`)"
    if isinstance(annotation, type) and issubclass(annotation, Strict):
        return "mapping"
    return _NAMES[annotation] + _bounds(metadata)


def _inner(annotation: Any) -> str:
    text = type_text(annotation)
    return f"({text})" if " or " in text else text


def _bounds(metadata: Sequence[Any]) -> str:
    found = [f"{sign} {getattr(m, attr):g}" for m in metadata for attr, sign in _BOUNDS
             if getattr(m, attr, None) is not None]
    return " " + ", ".join(found) if found else ""


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_unset=True)
    return f"`{yaml_text(value)}`"


def yaml_text(value: Any) -> str:
    """A value as it would be written in the YAML, on one line."""
    plain = list(value) if isinstance(value, tuple) else value
    text = yaml.safe_dump(plain, default_flow_style=True, width=1 << 20).strip()
    return text.removesuffix("...").strip()


def rows(section: Section) -> list[Row]:
    fields = section.model.model_fields
    names = sorted(fields, key=lambda name: name != "type")  # a variant's tag first
    return [Row(_join(section.path, name), type_text(fields[name].annotation,
                                                     fields[name].metadata),
                default_text(fields[name]), meaning(section, name)) for name in names]


# -- the page -----------------------------------------------------------------------------

def reference(root: type[BaseModel] = Spec) -> str:
    """The generated section: every key of `root` and the distributions; ReferenceGap if a
    key or a distribution has no meaning."""
    parts = [f"## Every key\n\nGenerated from the models in `hpo/spec/` by `{COMMAND}`: "
             "a key's meaning is its field's `# comment` there (or `description=`), after what "
             "the generator's MEANINGS table adds."]
    tables = [(section, rows(section)) for section in sections(root)]
    missing = [row.key for _, found in tables for row in found if not row.meaning]
    missing += [f"distribution {kind}" for kind in KINDS if kind not in KIND_MEANINGS]
    if missing:
        raise ReferenceGap(missing, "add a `# comment` to the field (or Field(description=...))"
                           ", or an entry to MEANINGS / KIND_MEANINGS in hpo/spec/reference.py")
    for index, (section, found) in enumerate(tables):
        parts.append(_section_text(section, found))
        if index == 0:
            parts.append(distributions_text())
    return "\n\n".join(parts) + "\n"


def _section_text(section: Section, found: list[Row]) -> str:
    doc = _own_doc(section.model)
    lines = [f"### {section.title}", *([prose(doc)] if doc else []),
             "| key | type | default | meaning |\n|---|---|---|---|"]
    lines[-1] += "".join(f"\n| `{r.key}` | {cell(r.type)} | {cell(r.default)} | "
                         f"{cell(r.meaning)} |" for r in found)
    return "\n\n".join(lines)


def distributions_text() -> str:
    head = ("### Distributions\n\nEach value of `search_space` and of "
            "`scheduler.hyperparam_mutations` is one `{kind: [arguments]}`, e.g. "
            "`lr: {loguniform: [1.0e-4, 1.0e-1]}`.\n\n"
            "| kind | arguments | draws |\n|---|---|---|")
    return head + "".join(f"\n| `{kind}` | {_arguments(kind)} | {KIND_MEANINGS[kind]} |"
                          for kind in KINDS)


def _arguments(kind: str) -> str:
    spec = KINDS[kind]
    if not spec.arity:
        return "`[value, ...]`"
    names = ["low", "high"] if spec.ranged else ["mean", "sd"]
    text = f"`[{', '.join(names + ['q'][:spec.arity - 2])}]`"
    notes = [note for note, applies in (("integers", spec.integer), ("low > 0", spec.positive))
             if applies]
    return f"{text} ({', '.join(notes)})" if notes else text


def prose(text: str) -> str:
    """Text for Markdown: `<` outside code spans escaped (it would start an HTML tag)."""
    parts = text.split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in
                    enumerate(parts))


def cell(text: str) -> str:
    return prose(text).replace("|", "\\|")


# -- the marked section of a page ---------------------------------------------------------

def markers(section: str) -> tuple[str, str]:
    return f"<!-- generated: {section} -->", f"<!-- end generated: {section} -->"


def generated_part(page: str, section: str) -> str:
    """The text between the page's markers for `section`; ValueError if they are missing."""
    start, end = markers(section)
    if page.count(start) != 1 or page.count(end) != 1 or page.index(start) > page.index(end):
        raise ValueError(f"the page needs one {start} line before one {end} line")
    return page.split(start, 1)[1].split(end, 1)[0].strip("\n") + "\n"


def spliced(page: str, section: str, text: str) -> str:
    """The page with the text between its markers for `section` replaced."""
    generated_part(page, section)
    start, end = markers(section)
    head, rest = page.split(start, 1)
    return f"{head}{start}\n{text.rstrip()}\n{end}{rest.split(end, 1)[1]}"


def page_main(argv: Sequence[str] | None, section: str, build: Callable[[], str],
              command: str) -> int:
    """The generators' command line: print, --write PAGE, or --check PAGE (1: out of date)."""
    parser = argparse.ArgumentParser(description=f"The generated '{section}' section.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, metavar="PAGE", help="replace the page's section")
    group.add_argument("--check", type=Path, metavar="PAGE", help="exit 1 if it differs")
    args = parser.parse_args(argv)
    try:
        text = build()
    except ReferenceGap as gap:
        print(f"error: {gap}", file=sys.stderr)
        return 1
    if args.write:
        args.write.write_text(spliced(args.write.read_text(), section, text))
    elif args.check:
        if generated_part(args.check.read_text(), section) != text:
            print(f"{args.check}: the generated section is out of date. Hint: {command}",
                  file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


def unused_meanings() -> list[str]:
    """Entries of MEANINGS that name no key (a renamed or removed field)."""
    keys = {row.key for section in sections() for row in rows(section)}
    return sorted(set(MEANINGS) - keys)


def main(argv: Sequence[str] | None = None) -> int:
    stale = unused_meanings()
    if stale:
        print(f"MEANINGS names no key: {', '.join(stale)}", file=sys.stderr)
        return 1
    return page_main(argv, "keys", reference, COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
