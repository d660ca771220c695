"""Every `hpo` command and option as Markdown, generated from the CLI itself.

docs/commands.md holds the reference between `<!-- generated: commands -->` markers:

    python -m hpo.cli.reference --write docs/commands.md   # regenerate the page's section
    python -m hpo.cli.reference --check docs/commands.md   # exit 1 when the page is out of date

It is read through click's introspection of the typer app (`typer.main.get_command`): each
command's docstring and each option as `--help` shows it. `hpo install ...` hands its
arguments to an installer's own argparse parser: its options are that parser's help. A
command or an option without help text fails the generator, naming it.
"""

from __future__ import annotations

import argparse
import functools
import importlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import typer
import typer.main

from hpo.cli import app
from hpo.spec.reference import ReferenceGap, cell, page_main, prose

COMMAND = "python -m hpo.cli.reference --write docs/commands.md"
#: The installer behind each command that forwards its arguments (`hpo install ...`).
INSTALLERS = {"hpo install horovod": "hpo.install.horovod.install",
              "hpo install wheelhouse": "hpo.install.wheelhouse"}
WIDTH = 90  # of the installers' help text, whatever the terminal


@dataclass(frozen=True)
class Entry:
    """One command (or group) as the CLI has it, with the click context it parses in."""

    path: str  # e.g. "hpo slurm render"
    command: Any
    context: Any

    @property
    def forwards(self) -> bool:
        """Its arguments go, unparsed, to an installer."""
        return bool(self.command.context_settings.get("ignore_unknown_options"))

    @property
    def usage(self) -> str:
        pieces = [self.path, "[OPTIONS]"]
        for param in self.command.params:
            if param.param_type_name == "argument":
                name = (param.metavar or param.name).upper()
                pieces.append(name if param.required else f"[{name}]")
        if hasattr(self.command, "list_commands"):
            pieces.append("COMMAND [ARGS]...")
        return " ".join(pieces)

    def _options(self) -> list[Any]:
        return [param for param in self.command.params
                if param.param_type_name == "option" and not param.hidden]

    def options(self) -> list[tuple[str, str]]:
        """(the option with its value, its help) as `--help` prints them; --help left out."""
        return [param.get_help_record(self.context) for param in self._options()]

    def unexplained(self) -> list[str]:
        """The options without help text, by their longest name."""
        return [max(param.opts, key=len) for param in self._options()
                if not (param.help or "").strip()]


def entries(root: typer.Typer = app) -> list[Entry]:
    """Every command, groups first and depth first; hidden ones left out."""
    return list(_walk(typer.main.get_command(root), "hpo", None))


def _walk(command: Any, name: str, parent: Any) -> Iterator[Entry]:
    context = command.context_class(command, info_name=name, parent=parent)
    yield Entry(context.command_path, command, context)
    for sub in command.list_commands(context) if hasattr(command, "list_commands") else []:
        found = command.get_command(context, sub)
        if not found.hidden:
            yield from _walk(found, sub, context)


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def _caught(parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
    raise _Parsed(parser)


def installer_parser(module: str) -> argparse.ArgumentParser:
    """The installer's parser, caught as its `main` is about to parse: nothing else runs."""
    with mock.patch.object(argparse.ArgumentParser, "parse_args", _caught):
        try:
            importlib.import_module(module).main([])
        except _Parsed as parsed:
            return parsed.parser
    raise ValueError(f"{module}.main() parsed no arguments")


def installer_help(module: str) -> str:
    parser = installer_parser(module)
    parser.formatter_class = functools.partial(
        argparse.HelpFormatter, width=WIDTH)
    return parser.format_help()


def gaps(found: Sequence[Entry]) -> list[str]:
    """What has no help text: commands, options, installers of forwarding commands."""
    missing = [entry.path for entry in found if not (entry.command.help or "").strip()]
    missing += [f"{entry.path} {flag}" for entry in found for flag in entry.unexplained()]
    missing += [f"{entry.path} (its installer)" for entry in found
                if entry.forwards and entry.path not in INSTALLERS]
    return missing


def reference(root: typer.Typer = app) -> str:
    """The generated section: every command and option; ReferenceGap if one has no help."""
    found = entries(root)
    missing = gaps(found)
    if missing:
        raise ReferenceGap(missing, "give the command a docstring and the option help=..., "
                           "or name a forwarding command's installer in INSTALLERS "
                           "(hpo/cli/reference.py)")
    head = (f"## Every command\n\nGenerated from the `hpo` command by `{COMMAND}`; "
            "`--help` after any command prints the same.")
    return "\n\n".join([head, *map(_entry_text, found)]) + "\n"


def _entry_text(entry: Entry) -> str:
    text = [f"### {entry.path}"]
    if not entry.forwards:
        text.append(f"`{entry.usage}`")
    text += [prose(" ".join(part.split())) for part in entry.command.help.split("\n\n")]
    if entry.forwards:
        text.append(f"```text\n{installer_help(INSTALLERS[entry.path]).rstrip()}\n```")
    elif entry.options():
        text.append("| option | meaning |\n|---|---|" + "".join(
            f"\n| `{option}` | {cell(' '.join(help_text.split()))} |"
            for option, help_text in entry.options()))
    return "\n\n".join(text)


def main(argv: Sequence[str] | None = None) -> int:
    return page_main(argv, "commands", reference, COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
