"""Jobs in a container (`slurm.container`): the rendered script, hpo's command line against
Apptainer's documented one, bad input in one line, the venv-on-a-quota warning, the host-side
step helper, and the stand-in runtime the test cluster uses."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from calls import cli_invoke
from golden_files import check_golden

from hpo.cluster.container_job import host_steps, quota_warning
from hpo.cluster.steps import CONTAINER, HOST_STEPS, start_step
from hpo.spec.site import site_layers
from hpo.spec.slurm import SlurmSettings
from testing import container_standin

ROOT = Path(__file__).resolve().parents[2]
SPACE = "tests/cluster/golden/container-space.yaml"
GOLDEN = ROOT / "tests/cluster/golden/site-lumi-g-container.sbatch"
REGENERATE = ("HPO_REGENERATE_GOLDEN=1 python -m pytest tests/cluster/test_slurm_container.py"
              "::test_lumi_container_job_renders_its_golden_file")
ARGS = ["slurm", "render", SPACE, "--site", "lumi-g", "--workdir",
        "/project/project_465000000/hpo", "--storage", "/scratch/project_465000000/hpo-results"]

# `apptainer exec [exec options...] <container> <command>` and the options hpo writes, as
# `apptainer exec --help` documents them (Apptainer's cmd/internal/cli/action_flags.go;
# https://apptainer.org/docs/user/main/cli/apptainer_exec.html): name -> takes a value.
# SingularityCE's `singularity exec` has the same form and these options.
GOOD = "name: exp\ntrainable: tests/support/study_trainables.py:steady\nmetric: score\nmode: max\n"
EXEC_OPTIONS = {"--nv": False, "--rocm": False, "-B": True, "--bind": True, "--env": True,
                "-e": False, "--cleanenv": False}


def _documented(words: list[str]) -> tuple[list[str], str, list[str]]:
    """(options, image, command) of an exec line; fails where Apptainer would read it
    otherwise."""
    assert words[0] in ("apptainer", "singularity") and words[1] == "exec", words
    i, options = 2, []
    while words[i].startswith("-"):
        assert words[i] in EXEC_OPTIONS, f"not an option of `apptainer exec`: {words[i]}"
        takes = EXEC_OPTIONS[words[i]]
        options += words[i:i + 1 + takes]
        i += 1 + takes
    return options, words[i], words[i + 1:]


def test_lumi_container_job_renders_its_golden_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code, text, stderr = cli_invoke(ARGS)
    assert code == 0, stderr
    check_golden(GOLDEN, text, REGENERATE)


def test_the_container_lines_follow_apptainers_documented_form() -> None:
    text = GOLDEN.read_text()
    steps = next(ln for ln in text.splitlines() if ln.startswith(f"export {CONTAINER}="))
    words = shlex.split(shlex.split(steps.split("=", 1)[1])[0])
    options, image, command = _documented([*words, "python3"])
    assert options == ["--rocm", "--bind", "/project/project_465000000", "--bind",
                       "/scratch/project_465000000"]  # amd: --rocm, before the image
    assert image.endswith(".sif") and command == ["python3"]
    driver = next(ln for ln in text.splitlines() if " -m hpo slurm run " in ln)
    words = shlex.split(driver.replace('"$HPO_HOST_STEPS"', "/tmp/hpo-steps.X").rstrip(" &"))
    options, driver_image, command = _documented(words)
    assert driver_image == image and "/tmp/hpo-steps.X" in options
    assert command[:4] == ["/project/project_465000000/hpo/venv-in-container/bin/python", "-m",
                           "hpo", "slurm"]  # the venv made inside the image
    # what Ray, RCCL and libfabric need reaches the inside, over the image's own environment
    for name, value in [("CXI_FORK_SAFE", "1"), ("CXI_FORK_SAFE_HP", "1"),
                        ("FI_CXI_DISABLE_CQ_HUGETLB", "1"), ("FI_MR_CACHE_MONITOR", "userfaultfd"),
                        ("NCCL_SOCKET_IFNAME", "hsn0,hsn1,hsn2,hsn3")]:
        assert f'export SINGULARITYENV_{name}="{value}"' in text, name
    assert text.index("hpo_host_steps &") < text.index(driver)  # srun's helper, on the host


@pytest.mark.parametrize(("vendor", "flag"), [("nvidia", "--nv"), ("amd", "--rocm"),
                                              (None, None)])
def test_the_gpu_option_follows_the_profiles_vendor(vendor: str | None,
                                                    flag: str | None) -> None:
    from hpo.cluster.container_job import container_words

    s = SlurmSettings(gpu_vendor=vendor, container={"image": "/c/i.sif"})
    options, _, _ = _documented([*container_words(s), "true"])
    assert options == ([flag] if flag else [])


@pytest.mark.parametrize(("container", "path", "words"), [
    ({"image": "t.sif"}, "slurm.container.image", "not an absolute path"),
    ({"image": "/c/t.sif", "runtime": "docker"}, "slurm.container.runtime", "docker"),
    ({"image": "/c/t.sif", "binds": ["scratch"]}, "slurm.container.binds.0", "absolute"),
    ({"image": "/c/t.sif", "binds": ["/a,/b"]}, "slurm.container.binds.0", "not a bind"),
    ({"image": "/c/t.sif", "binds": ["/a:/b:xx"]}, "slurm.container.binds.0", "xx"),
    ({"image": "/c/t.sif", "imag": 1}, "slurm.container.imag", "did you mean 'image'"),
])
def test_bad_container_keys_end_in_one_line(container: dict[str, object], path: str,
                                            words: str, tmp_path: Path) -> None:
    space = tmp_path / "exp.yaml"
    space.write_text(f"{GOOD}slurm: {{container: {json.dumps(container)}}}\n")
    code, _, line = cli_invoke(["slurm", "render", str(space), "--workdir", str(tmp_path)])
    assert code == 2 and line.count("\n") == 1, line
    assert path in line and words in line and "Hint" in line, line


def test_a_host_venv_and_a_container_are_refused_together(tmp_path: Path) -> None:
    space = tmp_path / "exp.yaml"
    space.write_text(GOOD + "slurm: {venv: /p/venv, container: {image: /c/t.sif}}\n")
    code, _, stderr = cli_invoke(["slurm", "render", str(space), "--workdir", str(tmp_path)])
    assert code == 2 and "slurm.venv" in stderr and "slurm.container.venv" in stderr, stderr


def test_a_venv_on_a_quotad_file_system_warns_once() -> None:
    lumi = SlurmSettings.model_validate(site_layers("lumi-g")[0][1])
    on_project = lumi.model_copy(update={"venv": "/project/project_465000000/venv"})
    line = quota_warning(on_project)
    assert line is not None and "/project/ (100000 files" in line and "slurm.container" in line
    # the environment that renders, when slurm.venv is unset
    assert quota_warning(lumi, prefix="/users/me/venv", base_prefix="/usr") is not None
    assert quota_warning(lumi, prefix="/scratch/p/venv", base_prefix="/usr") is None
    inside = SlurmSettings.model_validate({**site_layers("lumi-g")[0][1],
                                           "container": {"image": "/c/t.sif"}})
    assert quota_warning(inside, prefix="/project/p/venv", base_prefix="/usr") is None
    juwels = SlurmSettings.model_validate(site_layers("juwels-booster")[0][1])
    assert quota_warning(juwels, prefix="/project/p/venv", base_prefix="/usr") is None


def test_the_host_helper_starts_watches_and_ends_steps(tmp_path: Path) -> None:
    """host-steps.sh under bash with a fake srun: what hpo asks from inside runs outside,
    reports its exit status, and ends by its pid."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\necho "$@" > "$OUT/$1"\n'
                                  '[ "$1" = long ] && exec sleep 60\nexit 3\n')
    (bin_dir / "srun").chmod(0o755)
    script = f"{host_steps()}\necho \"$HPO_HOST_STEPS\"\nexec sleep 30\n"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path),
           "TMPDIR": str(tmp_path)}
    shell = subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        folder = shell.stdout.readline().strip()  # type: ignore[union-attr]
        inside = {HOST_STEPS: folder}
        short = start_step(["srun", "short", "a b"], inside)
        assert short.wait(timeout=10) == 3
        assert (tmp_path / "short").read_text() == "short a b\n"  # words kept apart
        long = start_step(["srun", "long"], inside)
        deadline = time.monotonic() + 10
        while not (tmp_path / "long").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert long.poll() is None
        long.kill()
        assert long.wait(timeout=10) == 137  # SIGKILL
        assert start_step(["rm", "-rf", "/x"], inside).poll() is None  # not srun: ignored
    finally:
        shell.kill()
        shell.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="the stand-in enters a mount namespace (root)")
def test_the_standin_hides_what_is_not_bound(tmp_path: Path) -> None:
    """A path the image does not hold and no bind brings in is missing, and so is srun;
    a bound one is there; APPTAINERENV_X reaches the inside as X."""
    bin_dir = container_standin.install(tmp_path / "bin")
    image = container_standin.make_image(tmp_path / "image")
    outside = Path("/srv") if Path("/srv").is_dir() else Path("/mnt")
    probe = ("import os, shutil, sys; print(shutil.which('srun'), os.path.isdir(sys.argv[1]), "
             "os.environ.get('FI_MR_CACHE_MONITOR'))")
    env = {**os.environ, "APPTAINERENV_FI_MR_CACHE_MONITOR": "userfaultfd"}
    run = [str(bin_dir / "apptainer"), "exec", "--rocm", str(image), sys.executable, "-c", probe,
           str(outside)]
    done = subprocess.run(run, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "False", "userfaultfd"], done.stdout
    bound = [*run[:3], "--bind", str(outside), *run[3:]]
    done = subprocess.run(bound, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert done.stdout.split()[1] == "True", done.stdout + done.stderr
    wrong = [*run[:2], "--writable-tmpfs", *run[2:]]
    done = subprocess.run(wrong, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 255 and re.search("unknown exec option", done.stderr)
