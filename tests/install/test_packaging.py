"""The installed package works without the repository: a wheel built from the sources, installed
into a bare folder and run from elsewhere, renders the golden sbatch scripts (its template and
the built-in site profiles ship inside the package) and runs a tiny experiment with the
built-in trainables."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from calls import build_wheel
from golden_files import with_golden_venv

ROOT = Path(__file__).resolve().parents[2]
# slow: each test builds hpo's wheel and installs it into a bare folder
pytestmark = pytest.mark.slow
GOLDEN = ROOT / "tests" / "cluster" / "golden"
SITES = ("juwels-booster", "jureca-dc", "lumi-g")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding only the installed wheel (its dependencies come from this venv)."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(tmp)
    names = zipfile.ZipFile(wheel).namelist()
    assert "hpo/cluster/hpo-job.sbatch" in names
    for site in SITES:  # the built-in site profiles (`--site NAME`)
        assert f"hpo/spec/sites/{site}.yaml" in names, site
    target = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), str(wheel)], check=True)
    return target


def _python(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # sys.path entries come before the editable install's finder: `hpo` loads from `site`.
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_installed_package_renders_the_golden_sbatch(installed: Path, tmp_path: Path) -> None:
    where = _python(installed, tmp_path, "-c", "import hpo; print(hpo.__file__)")
    assert where.stdout.startswith(str(installed)), where.stdout + where.stderr
    shutil.copytree(GOLDEN, tmp_path / "tests" / "cluster" / "golden")
    done = _python(installed, tmp_path, "-m", "hpo", "slurm", "render",
                   "tests/cluster/golden/slurm-space.yaml", "--workdir", "/p/project/hpo",
                   "--storage", "/p/scratch/hpo/results")
    assert done.returncode == 0, done.stderr
    assert with_golden_venv(done.stdout, tmp_path) == (GOLDEN / "slurm-job.sbatch").read_text()
    for site in SITES:
        done = _python(installed, tmp_path, "-m", "hpo", "slurm", "render",
                       "tests/cluster/golden/site-space.yaml", "--site", site, "--workdir",
                       "/p/project/hpo", "--storage", "/p/scratch/hpo/results")
        assert done.returncode == 0, done.stderr
        golden = (GOLDEN / f"site-{site}.sbatch").read_text()
        assert with_golden_venv(done.stdout, tmp_path) == golden, site


@pytest.mark.ray
def test_installed_package_runs_an_experiment(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(
        "name: tiny\ntrainable: trainables.digits:train\nmetric: val_accuracy\nmode: max\n"
        "num_samples: 2\nsearch_space: {lr: {loguniform: [1e-3, 1e-1]}}\n"
        "constants: {epochs: 1}\n")
    done = _python(installed, tmp_path, "-m", "hpo", "run", "space.yaml", "--storage", "out",
                   "--cpus", "2")
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "out" / "tiny").glob("*/result.json"))) == 2


def test_no_page_installs_the_unrelated_pypi_hpo() -> None:
    """PyPI's `hpo` is another project: the docs install from the checkout (hpo-hpc)."""
    import re

    assert '\nname = "hpo-hpc"\n' in (ROOT / "pyproject.toml").read_text()
    wrong = re.compile(r"pip install\s+(-U\s+)?['\"]?hpo(\[|['\"\s]|$)", re.M)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [(page.name, m.group(0)) for page in pages for m in wrong.finditer(page.read_text())]
    assert found == [], found
    assert wrong.search("pip install 'hpo[mlflow]'") and wrong.search("pip install hpo\n")
