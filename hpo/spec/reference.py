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
from hpo.spec.meanings import KIND_MEANINGS, MEANINGS
from hpo.spec.model import Spec

COMMAND = "python -m hpo.spec.reference --write docs/spec.md"
NAME = "NAME"  # the placeholder of a mapping's own keys: slurm.partitions.NAME.max_time

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
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]  # a class statement
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
    above: list[str] = []
    line = node.lineno - 1
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
    factory = field.default_factory
    value = factory() if factory else field.default  # type: ignore[call-arg]  # takes no data here
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_unset=True)
    return f"`{yaml_text(value)}`"


def yaml_text(value: Any) -> str:
    """A value as it would be written in the YAML, on one line."""
    plain = list(value) if isinstance(value, tuple) else value
    text: str = yaml.safe_dump(plain, default_flow_style=True, width=1 << 20).strip()
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
                           ", or an entry to MEANINGS / KIND_MEANINGS in hpo/spec/meanings.py")
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
