"""One signature per public function: `hpo.run`/`hpo.resume` (the facade) are what the
driver, the CLI and the manual's Python API page use, with the same names and defaults."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import hpo
import hpo.errors
from hpo.cli import resume as cli_resume
from hpo.cli import run as cli_run
from hpo.driver.run import runner

ROOT = Path(__file__).resolve().parents[2]
# the CLI's option names -> the facade's keywords (SPACE, --set go through hpo.load_spec)
CLI_TO_FACADE = {"storage": "storage", "name": "name", "cpus": "num_cpus",
                 "time_limit": "time_limit_s", "experiment_dir": "experiment_dir",
                 "fresh": "fresh"}


def _shape(func: object) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(func).parameters.values()]


@pytest.mark.parametrize("facade, driver", [(hpo.run, runner.run),
                                            (hpo.resume, runner.resume)])
def test_the_facade_and_the_driver_have_one_signature(facade: object, driver: object) -> None:
    assert _shape(facade) == _shape(driver)


@pytest.mark.parametrize("facade", [hpo.run, hpo.resume])
def test_the_facade_documents_every_parameter(facade: object) -> None:
    doc = inspect.getdoc(facade) or ""
    missing = [name for name in inspect.signature(facade).parameters
               if not re.search(rf"^\s+{name}:", doc, re.M)]
    assert not missing, missing


@pytest.mark.parametrize("command, facade", [(cli_run, hpo.run), (cli_resume, hpo.resume)])
def test_every_cli_flag_is_a_facade_keyword(command: object, facade: object) -> None:
    flags = set(inspect.signature(command).parameters) - {"space", "overrides"}
    keywords = set(inspect.signature(facade).parameters)
    assert {CLI_TO_FACADE[flag] for flag in flags} <= keywords


def test_the_docs_call_the_facade_with_their_own_keywords() -> None:
    section = (ROOT / "docs/python-api.md").read_text() + (ROOT / "README.md").read_text()
    for function in ("run", "resume"):
        keywords = set(inspect.signature(getattr(hpo, function)).parameters)
        calls = re.findall(rf"hpo\.{function}\((.*?)\)\n", section, re.S)
        assert calls, function  # the docs show each
        for call in calls:
            used = set(re.findall(r"(\w+)=", call))
            assert used <= keywords, (function, used - keywords)


def test_every_error_a_user_can_catch_is_exported() -> None:
    errors = {name for name, value in vars(hpo.errors).items()
              if inspect.isclass(value) and issubclass(value, hpo.errors.HpoError)}
    assert errors <= set(hpo.__all__), errors - set(hpo.__all__)
