"""The manual (README.md and docs/) as a user reads it: it builds with `mkdocs build --strict`
(links, anchors, nav); README stays a front door; every `hpo ...` command in it parses against
the real CLI; every YAML block is a valid spec or a valid part of one; every Python fragment
compiles and its imports resolve; README's tour runs end to end (slow). The Python API page's
complete examples run in tests/e2e/test_docs_python_api.py."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from hpo.cli import app
from hpo.spec._yaml import parse_yaml
from hpo.spec.load import spec_from_dict

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# complete scripts, run by tests/e2e/test_docs_python_api.py
RUN_ELSEWHERE = {ROOT / "docs/python-api.md", ROOT / "README.md"}
# a YAML part is checked inside this spec
BASE = {"name": "doc", "trainable": "trainables.digits:train", "metric": "val_accuracy",
        "mode": "max"}


def _blocks(lang: str, pages: list[Path] = PAGES) -> list[tuple[str, str]]:
    return [(page.relative_to(ROOT).as_posix(), text) for page in pages
            for text in re.findall(rf"^```{lang}\n(.*?)^```", page.read_text(), re.S | re.M)]


def _hpo_commands() -> list[tuple[str, str]]:
    """Each `hpo ...` in a bash block (also after `&&`), comments dropped."""
    found = []
    for page, block in _blocks("bash"):
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words and Path(words[0]).name == "hpo":
                    found.append((page, shlex.join(words[1:])))
    return found


def test_the_manual_builds_with_no_warning(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site/rasda/index.html").exists()


def test_the_readme_is_a_front_door_whose_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert targets and all((ROOT / t).is_file() for t in targets), targets
    assert {t for t in targets if t.startswith("docs/")} >= {
        f"docs/{p.name}" for p in PAGES if p.parent.name == "docs" and p.name != "index.md"}


def _parse(command: Any, args: list[str], parent: Any = None, name: str = "hpo") -> None:
    """Parse `args` as the CLI would, down to the subcommand, without running it (typer's
    own click: its groups have resolve_command)."""
    ctx = command.make_context(name, list(args), parent=parent)
    if hasattr(command, "resolve_command"):
        rest = [*ctx._protected_args, *ctx.args]
        sub_name, sub, sub_args = command.resolve_command(ctx, rest)
        assert sub is not None, rest
        _parse(sub, sub_args, ctx, sub_name or "")


@pytest.mark.parametrize(("page", "line"), _hpo_commands())
def test_every_hpo_command_in_the_manual_parses(page: str, line: str) -> None:
    _parse(typer.main.get_command(app), shlex.split(line))


def test_the_command_check_catches_a_wrong_flag() -> None:
    with pytest.raises(Exception, match="No such option: --nodez"):
        _parse(typer.main.get_command(app), ["slurm", "join", "x", "--nodez", "2"])
    assert len(_hpo_commands()) >= 15


def _allocation_steps() -> list[tuple[str, str, str]]:
    """(page, the block's salloc line or "", srun line) for every srun in a bash block."""
    found = []
    for page, block in _blocks("bash"):
        salloc = ""
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["salloc"]:
                salloc = line
            elif words[:1] == ["srun"]:
                found.append((page, salloc, line))
    return found


@pytest.mark.parametrize(("page", "salloc", "srun"), _allocation_steps())
def test_every_step_of_an_allocation_asks_for_cpus_the_allocation_named(
        page: str, salloc: str, srun: str) -> None:
    """Slurm sets SLURM_CPUS_PER_TASK only when the allocation names --cpus-per-task: an
    `srun -c "$SLURM_CPUS_PER_TASK"` after a bare salloc gets `-c ""` and fails; and the hpo
    command of the step parses."""
    words = shlex.split(srun, comments=True)
    if any("SLURM_CPUS_PER_TASK" in word for word in words):
        asked = shlex.split(salloc, comments=True)
        assert asked, f"{page}: {srun!r} has no salloc before it in its block"
        assert "-c" in asked or any(w.startswith("--cpus-per-task") for w in asked), (
            f"{page}: {salloc!r} names no --cpus-per-task, so {srun!r} gets -c \"\"")
    if "hpo" in words:
        _parse(typer.main.get_command(app), words[words.index("hpo") + 1:])


def test_the_first_job_page_checks_nodes_through_srun() -> None:
    steps = [row for row in _allocation_steps() if row[0] == "docs/first-job.md"]
    assert len(steps) >= 2 and all(salloc for _, salloc, _ in steps)


@pytest.mark.parametrize(("page", "block"), _blocks("yaml"))
def test_every_yaml_block_is_a_valid_spec_or_part_of_one(page: str, block: str) -> None:
    data = parse_yaml(block, page)
    spec_from_dict(data if "trainable" in data else {**BASE, **data}, page)


@pytest.mark.parametrize(("page", "block"), [
    b for b in _blocks("python") if ROOT / b[0] not in RUN_ELSEWHERE])
def test_every_python_fragment_compiles_and_its_imports_resolve(page: str, block: str) -> None:
    compile(block, f"{page}, a python block", "exec")
    imports = [line for line in block.splitlines() if re.match(r"(import|from) \S", line)]
    exec("\n".join(imports), {})


@pytest.mark.slow
def test_the_readme_tour_runs(tmp_path: Path) -> None:
    """The tour's commands, one after another, in a fresh folder as a user would run them."""
    (tmp_path / "search_spaces").symlink_to(ROOT / "search_spaces")
    tour = next(block for _, block in _blocks("bash", [ROOT / "README.md"])
                if "hpo validate" in block)
    hpo = shutil.which("hpo", path=str(Path(sys.executable).parent)) or "hpo"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for line in tour.splitlines():
        words = shlex.split(line, comments=True)
        done = subprocess.run([hpo, *words[1:]], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, (line, done.stderr[-2000:])
    assert (tmp_path / "hpo-results/digits-asha/report.html").is_file()
    curves = (tmp_path / "curves.csv").read_text().splitlines()
    assert curves[0].startswith("trial_id,training_iteration") and len(curves) > 8


def test_the_readme_shows_the_demo_yaml_as_it_is() -> None:
    """The block README labels `search_spaces/digits-asha.yaml` is that file, byte for byte."""
    name = "search_spaces/digits-asha.yaml"
    shown = re.search(rf"\(`{re.escape(name)}`\):\n\n```yaml\n(.*?)^```",
                      (ROOT / "README.md").read_text(), re.S | re.M)
    assert shown, f"README no longer shows {name} after a line naming it"
    assert shown.group(1) == (ROOT / name).read_text(), f"copy {name} into README.md again"
