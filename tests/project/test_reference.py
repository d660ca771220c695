"""The generated references: docs/spec.md's every key (hpo.spec.reference) and docs/commands.md's
every command and option (hpo.cli.reference). Each page's marked section is what its generator
writes now (on a mismatch: the changed lines and the command that regenerates it); every field
of every spec model and every option of every command is in it, found here without the
generators' own walk; a key or an option without a meaning fails the generator, naming it."""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import Field
from typer.models import OptionInfo

from hpo.cli import app
from hpo.cli import reference as commands
from hpo.install.horovod.install import parser as horovod_parser
from hpo.spec import reference as keys
from hpo.spec._validation import Strict
from hpo.spec.distributions import KINDS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [("docs/spec.md", "keys", keys.reference, keys.COMMAND),
         ("docs/commands.md", "commands", commands.reference, commands.COMMAND)]


def _section(page: str, name: str) -> str:
    return keys.generated_part((ROOT / page).read_text(), name)


def _headed(text: str) -> dict[str, str]:
    """A generated section's parts by their `###` heading."""
    parts = re.split(r"^### (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize(("page", "name", "build", "command"), PAGES)
def test_the_generated_section_is_what_the_generator_writes_now(
        page: str, name: str, build: Callable[[], str], command: str) -> None:
    written, now = _section(page, name), build()
    changed = list(difflib.unified_diff(written.splitlines(), now.splitlines(), page,
                                        "generated now", lineterm="", n=0))
    assert written == now, (f"{page} is out of date; regenerate it: {command}\n"
                            + "\n".join(changed[:40]))


def test_check_names_the_command_when_a_page_is_out_of_date(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "spec.md"
    page.write_text("# Title\n\nprose\n\n<!-- generated: keys -->\nstale text\n"
                    "<!-- end generated: keys -->\n\nmore prose\n")
    assert keys.main(["--check", str(page)]) == 1
    assert keys.COMMAND in capsys.readouterr().err
    assert keys.main(["--write", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Title\n\nprose\n\n") and text.endswith("\n\nmore prose\n")
    assert "stale text" not in text and "| `slurm.partitions.NAME.max_time` |" in text
    assert keys.main(["--check", str(page)]) == 0


def test_a_page_without_its_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="generated: keys"):
        keys.spliced("# no markers\n", "keys", "text")


# -- every key ----------------------------------------------------------------------------

def _models(base: type = Strict) -> Iterator[type]:
    for model in base.__subclasses__():
        if model.__module__.startswith("hpo.spec."):
            yield model
        yield from _models(model)


def _row_names(part: str) -> set[str]:
    """The last component of each key in a part's table: `scheduler.max_t` -> max_t."""
    return {key.rsplit(".", 1)[-1] for key in re.findall(r"^\| `([\w.]+)` \|", part, re.M)}


@pytest.mark.parametrize("model", sorted(_models(), key=lambda m: m.__qualname__),
                         ids=lambda m: m.__qualname__)
def test_every_field_of_every_spec_model_is_in_the_page(model: type) -> None:
    """Every Strict model in hpo.spec, whether the generator's walk reaches it or not, has
    one part of the page that lists all its fields."""
    parts = _headed(_section("docs/spec.md", "keys"))
    fields = set(model.model_fields)  # type: ignore[attr-defined]
    assert any(fields <= _row_names(part) for part in parts.values()), (
        f"{model.__qualname__}: {sorted(fields)} are not all in one part of docs/spec.md")


def test_every_distribution_is_in_the_page() -> None:
    part = _headed(_section("docs/spec.md", "keys"))["Distributions"]
    assert set(re.findall(r"^\| `(\w+)` \|", part, re.M)) == set(KINDS)


class _Inner(Strict):
    bare: int = 0


class _Probe(Strict):
    """A model as a developer might leave it."""

    trailing: int = 1  # said on its line
    # said above it,
    # over two lines
    above: int = 2
    described: int = Field(3, description="said by pydantic")
    pragma: int = 4  # type: ignore[assignment]
    unsaid: int = 5
    inner: _Inner = Field(default_factory=_Inner)  # a nested mapping


def test_meanings_come_from_descriptions_and_comments() -> None:
    assert keys.source_comments(_Probe) == {
        "trailing": "said on its line", "above": "said above it, over two lines",
        "inner": "a nested mapping"}
    section = keys.Section("", _Probe)
    assert keys.meaning(section, "described") == "Said by pydantic."
    assert keys.meaning(section, "pragma") == ""


def test_a_key_without_a_meaning_fails_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(keys.ReferenceGap) as caught:
        keys.reference(_Probe)
    assert caught.value.missing == ["pragma", "unsaid", "inner.bare"]
    assert "MEANINGS" in str(caught.value)
    for path in caught.value.missing:  # the table fills in where the source says nothing
        monkeypatch.setitem(keys.MEANINGS, path, f"{path} explained.")
    assert "| `inner.bare` | int | `0` | Inner.bare explained. |" in keys.reference(_Probe)


def test_a_distribution_without_a_meaning_fails_the_generator(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(keys.KIND_MEANINGS, "grid")
    with pytest.raises(keys.ReferenceGap, match="distribution grid"):
        keys.reference()


def test_every_entry_of_the_meanings_table_names_a_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert keys.unused_meanings() == []
    monkeypatch.setitem(keys.MEANINGS, "scheduler.grace_perid", "a typo")
    assert keys.unused_meanings() == ["scheduler.grace_perid"]


@pytest.mark.parametrize(("annotation", "text"), [
    (keys.Spec.model_fields["mode"].annotation, "`max` or `min` or list of (`max` or `min`)"),
    (keys.Spec.model_fields["max_concurrent"].annotation, "int > 0 or null"),
    (dict[str, float], "mapping of str to float"),
])
def test_types_read_as_a_yaml_writer_thinks_of_them(annotation: Any, text: str) -> None:
    assert keys.type_text(annotation) == text


# -- every command and option -------------------------------------------------------------

def _registered(typer_app: typer.Typer, path: str = "hpo") -> Iterator[tuple[str, Any]]:
    """(command path, callback) from typer's own registry, hidden commands left out."""
    if typer_app.registered_callback is not None:
        yield path, typer_app.registered_callback.callback
    for info in typer_app.registered_commands:
        if not info.hidden:
            yield f"{path} {info.name or info.callback.__name__}", info.callback
    for group in typer_app.registered_groups:
        yield from _registered(group.typer_instance, f"{path} {group.name}")


def _declared(callback: Any) -> Iterator[tuple[str, bool]]:
    """(an option's flag or an argument's name, whether it is an option)."""
    for name, param in inspect.signature(callback).parameters.items():
        if isinstance(param.default, OptionInfo):
            decls = param.default.param_decls or (f"--{name.replace('_', '-')}",)
            yield from ((flag, True) for decl in decls for flag in decl.split("/"))
        elif param.annotation not in ("typer.Context", typer.Context):
            yield name.upper(), False


@pytest.mark.parametrize(("path", "callback"), list(_registered(app)),
                         ids=[path for path, _ in _registered(app)])
def test_every_command_option_and_argument_is_in_the_page(path: str, callback: Any) -> None:
    part = _headed(_section("docs/commands.md", "commands")).get(path)
    assert part is not None, f"{path} is not in docs/commands.md"
    cells = re.findall(r"^\| `([^`]+)` \|", part, re.M)
    flags = {word for cell in cells for word in re.split(r"[ ,/]+", cell)}
    for flag, is_option in _declared(callback):
        if is_option:
            assert flag in flags, f"{path} {flag} is not in docs/commands.md"
        else:
            assert f" {flag}`" in part or f" {flag} " in part, f"{path}: {flag} not in usage"


def test_the_installers_options_are_in_the_page() -> None:
    part = _headed(_section("docs/commands.md", "commands"))["hpo install horovod"]
    flags = set(re.findall(r"--[a-z-]+", horovod_parser().format_usage()))
    assert flags and all(flag in part for flag in flags)
    wheelhouse = _headed(_section("docs/commands.md", "commands"))["hpo install wheelhouse"]
    assert "--trim-ray" in wheelhouse and "usage: hpo install wheelhouse" in wheelhouse


def _probe_app() -> typer.Typer:
    probe = typer.Typer(help="A CLI as a developer might leave it.")

    @probe.command()
    def said(loud: bool = typer.Option(False, help="Say it loudly.")) -> None:
        """Say something."""

    @probe.command()
    def unsaid(quiet: bool = typer.Option(False, "--quiet", "-q")) -> None:
        pass

    return probe


def test_a_command_or_option_without_help_fails_the_generator() -> None:
    with pytest.raises(keys.ReferenceGap) as caught:
        commands.reference(_probe_app())
    assert caught.value.missing == ["hpo unsaid", "hpo unsaid --quiet"]


def test_a_forwarding_command_needs_its_installer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(commands.INSTALLERS, "hpo install wheelhouse")
    with pytest.raises(keys.ReferenceGap, match=r"hpo install wheelhouse \(its installer\)"):
        commands.reference()
