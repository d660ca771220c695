"""A folder named `hpo` in the working folder changes nothing: the trials import the hpo that
runs the study (hpo.cluster.own_import), and a working folder whose `hpo` is another Python
package is refused in one line.

The study runs as a user's would: `hpo` started without the working folder on its path (as
its console script is), hpo found through an editable install's finder, which Python asks only
after its path finder (the case that broke: the path finder took ./hpo as a namespace package).
The finder is the code under test's, installed in every process (driver, Ray's workers, the
fork server) by a sitecustomize on PYTHONPATH, ahead of any other installed hpo's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpo.cluster import own_import
from hpo.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

FINDER = textwrap.dedent(f"""
    import importlib.util, sys
    from importlib.machinery import PathFinder

    class _Editable:  # as setuptools' editable finder: asked after the path finder
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name == "hpo":
                return importlib.util.spec_from_file_location(
                    "hpo", {str(ROOT / "hpo" / "__init__.py")!r},
                    submodule_search_locations=[{str(ROOT / "hpo")!r}])
            return None

    sys.meta_path.insert(sys.meta_path.index(PathFinder) + 1, _Editable)
""")

TRAINABLE = textwrap.dedent("""
    import hpo

    def train(config):
        for step in range(1, 4):
            hpo.report({"loss": config["x"] * step})
""")

SPEC = textwrap.dedent("""
    name: beside-hpo
    trainable: beside.py:train
    metric: loss
    mode: min
    search_space:
      x: {grid: [1, 2]}
    scheduler: {type: fifo}
    search: {type: grid}
    storage: ./results
""")


def _folder(tmp_path: Path, layout: str) -> Path:
    """The user's working folder: the spec, its trainable, and `hpo` as `layout` says."""
    work = tmp_path / "work"
    (work / "hpo").mkdir(parents=True)
    if layout == "clone":  # the project cloned into ./hpo: a folder holding hpo/__init__.py
        (work / "hpo" / "hpo").mkdir()
        (work / "hpo" / "hpo" / "__init__.py").write_text("")
        (work / "hpo" / "pyproject.toml").write_text("")
    elif layout == "package":
        (work / "hpo" / "__init__.py").write_text("")
    (work / "beside.py").write_text(TRAINABLE)
    (work / "space.yaml").write_text(SPEC)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FINDER)
    return work


def _hpo(work: Path, *args: str, patches: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(work.parent / "site"), "PYTHONUNBUFFERED": "1",
           "HPO_RAY_PATCHES": patches}
    # -P: no working folder on the driver's own path, as the `hpo` console script has none
    return subprocess.run([sys.executable, "-P", "-m", "hpo", *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="-P needs Python 3.11")
@pytest.mark.parametrize(("layout", "patches"), [("empty", "-fork-workers"), ("clone", "")])
def test_a_folder_named_hpo_changes_nothing(tmp_path: Path, layout: str, patches: str) -> None:
    """Workers Ray starts fresh (their PYTHONPATH), and workers forked from hpo's server
    (which imports hpo in its own process)."""
    work = _folder(tmp_path, layout)
    done = _hpo(work, "run", "space.yaml", patches=patches)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2/2 trials  terminated 2" in done.stderr, done.stderr[-3000:]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="-P needs Python 3.11")
def test_a_package_named_hpo_is_refused_in_one_line(tmp_path: Path) -> None:
    work = _folder(tmp_path, "package")
    for command in ("validate", "run"):
        done = _hpo(work, command, "space.yaml")
        assert done.returncode == 2, done.stdout + done.stderr
        said = [line for line in done.stderr.splitlines() if "./hpo" in line]
        assert len(said) == 1 and "rename ./hpo" in said[0], done.stderr
        assert not (work / "results").exists()


def test_the_check_names_what_shadows(tmp_path: Path) -> None:
    own_import.check_working_folder("s.yaml", tmp_path)  # nothing there
    (tmp_path / "hpo").mkdir()
    own_import.check_working_folder("s.yaml", tmp_path)  # a namespace folder: arranged
    own_import.check_working_folder("s.yaml", own_import.own_package().parent)  # this hpo
    (tmp_path / "hpo.py").write_text("")
    with pytest.raises(ConfigError, match=r"\./hpo\.py in the working folder"):
        own_import.check_working_folder("s.yaml", tmp_path)


def test_workers_get_this_hpos_root_only_where_they_would_not_find_it() -> None:
    root = str(own_import.own_package().parent)
    assert own_import.workers_env({"PYTHONPATH": root}) == {}
    added = own_import.workers_env({"PYTHONPATH": "/elsewhere"})
    if own_import.found_on_path({}):  # a regular install: found in site-packages
        assert added == {}
    else:  # an editable install or a checkout: its root last on the workers' path
        assert added == {"PYTHONPATH": os.pathsep.join(["/elsewhere", root])}
