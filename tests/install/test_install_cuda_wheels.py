"""`hpo install horovod --cuda [VERSION] --arch LIST`: bad requests refused in one line before
anything is built or installed; the toolchain wheels pinned to torch's CUDA; nvcc found in
PyPI's wheel layout (CUDA 13 and 12) and staged as one CUDA home; an nvcc that refuses the host
compiler; the wheel stripped with a RECORD that matches; a login node's wheel reused by a newer
compiler; one NCCL per process. No GPU, no CUDA and no network needed (fakes stand in)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from horovod_toolchains import CPU, CUDA13, ROCM5, plan, refusal

from hpo.install.horovod import build, cache, cuda, cuda_wheels, install, probe, verify
from hpo.install.horovod.toolchain import Request

ROOT = Path(__file__).resolve().parents[2]
CUDA13_WHEELS = dataclasses.replace(
    CUDA13, nvcc="/venv/lib/python3.12/site-packages/nvidia/cu13/bin/nvcc",
    nvcc_version="13.0.88", toolkit_pin="cuda-toolkit[nvcc,cccl,crt,nvvm]==13.0.2",
    nccl_pin="nvidia-nccl-cu13==2.27.3")


# --- bad input: one line, before anything is built -----------------------------------------

@pytest.mark.parametrize(("found", "request_", "phrase"), [
    (CPU, Request(cuda="torch"), "torch 2.13.0+cpu has no CUDA"),
    (CPU, Request(cuda="13"), "has no CUDA"),
    (CPU, Request(archs="90"), "--arch 90: torch 2.13.0+cpu is not a CUDA build"),
    (ROCM5, Request(cuda="torch"), "is a ROCm build"),
    (CUDA13_WHEELS, Request(cuda="12"), "--cuda 12 differs from torch 2.11.0+cu130's CUDA 13.0"),
    (CUDA13_WHEELS, Request(cuda="12.x"), "or ask for --cuda 13"),
    (CUDA13_WHEELS, Request(cuda="twelve"), "expected a CUDA version"),
    (CUDA13_WHEELS, Request(cuda="torch", archs="70"), "cannot run on sm 70 of --arch"),
    (CUDA13_WHEELS, Request(cuda="torch", archs="sm_90,7.0"), "cannot run on sm 70"),
    (CUDA13_WHEELS, Request(cuda="torch", archs="volta"), "expected compute capabilities"),
    (CUDA13_WHEELS, Request(cuda="torch", archs="95"), "can build none of the CUDA archs"),
    (dataclasses.replace(CUDA13_WHEELS, nvcc_archs=(75, 80, 86, 90)), Request(archs="90,100"),
     "cannot build sm 100 of --arch (90,100)"),
    (dataclasses.replace(CUDA13_WHEELS, nvcc_host_error="gcc versions later than 15 are not "
                         "supported"), Request(cuda="torch"), "refuses gcc 13.3.0"),
    (dataclasses.replace(CUDA13_WHEELS, nvcc=None), Request(cuda="torch"), "run with --cuda"),
])
def test_a_bad_request_is_refused_in_one_line(found, request_, phrase: str) -> None:
    assert phrase in refusal(found, request_)


@pytest.mark.parametrize("asked", ["torch", "13", "13.x", "13.0"])
def test_cuda_of_torchs_major_builds_nccl_with_the_wheels_nvcc(asked: str) -> None:
    built = plan(CUDA13_WHEELS, Request(cuda=asked, archs="9.0"))
    assert built.cuda_wheels and built.env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert built.env["HOROVOD_BUILD_CUDA_CC_LIST"] == "90"
    assert "cuda13.0-sm90-nccl2.27.3" in built.key and "(PyPI wheels)" in built.summary


def test_the_arch_option_wins_over_the_environment_and_names_archs_torch_runs() -> None:
    found = dataclasses.replace(CUDA13_WHEELS, cc_env="75", arch_env="7.5")
    assert plan(found, Request(archs="80;89")).env["HOROVOD_BUILD_CUDA_CC_LIST"] == "80,89"
    assert plan(found, Request(archs="hopper")).env["HOROVOD_BUILD_CUDA_CC_LIST"] == "90"


@pytest.mark.parametrize(("cc", "archs", "runs"), [
    (90, ("sm_80", "sm_90"), True),
    (89, ("sm_80", "sm_86"), True),  # a cubin runs on a newer minor of its major
    (90, ("sm_80", "sm_86"), False),  # not on the next major
    (121, ("sm_90", "compute_120"), True),  # PTX JIT-compiles on newer GPUs
    (70, ("sm_75", "compute_75"), False),
    (70, (), True),  # torch's list unknown: not refused on a guess
])
def test_which_archs_torch_has_kernels_for(cc: int, archs: tuple[str, ...], runs: bool) -> None:
    assert cuda.torch_runs(cc, archs) is runs


# --- toolkit wheels pinned to torch ---------------------------------------------------------

def test_the_toolkit_and_nccl_pins_come_from_torchs_own_requirements() -> None:
    torch_211 = ["filelock", "cuda-toolkit[cublas,cudart,nvrtc]==13.0.2; platform_system == "
                 "\"Linux\"", "nvidia-nccl-cu13==2.28.9; platform_system == \"Linux\""]
    assert cuda_wheels.toolkit_pin("13.0", torch_211) == "cuda-toolkit[nvcc,cccl,crt,nvvm]==13.0.2"
    assert cuda_wheels.nccl_pin(torch_211) == "nvidia-nccl-cu13==2.28.9"
    torch_cu128 = ["nvidia-cuda-runtime-cu12==12.8.90; platform_system == \"Linux\""]
    assert cuda_wheels.toolkit_pin("12.8", torch_cu128) == \
        "cuda-toolkit[nvcc,cccl,crt,nvvm]==12.8.*"  # a component's version is not the toolkit's
    assert cuda_wheels.toolkit_pin("12.6", []) == "cuda-toolkit[nvcc,cccl,crt,nvvm]==12.6.*"
    assert cuda_wheels.toolkit_pin(None, []) is None and cuda_wheels.nccl_pin([]) is None


def _flow(monkeypatch, found, toolchains: list) -> list[tuple[str, ...]]:
    """install._complete with pip and the probe replaced: returns the pip calls made."""
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(install, "pip", lambda log, *args, **kw: calls.append(args))
    monkeypatch.setattr(install, "probe", lambda wheels_first=False: toolchains.pop(0))
    install._complete(found, Request(cuda="torch"), Path(os.devnull))
    return calls


def test_cuda_installs_the_pinned_toolkit_only_when_its_nvcc_is_missing(monkeypatch) -> None:
    missing = dataclasses.replace(CUDA13_WHEELS, nvcc=None, nvcc_version=None)
    calls = _flow(monkeypatch, missing, [CUDA13_WHEELS])
    assert calls == [("install", "cuda-toolkit[nvcc,cccl,crt,nvvm]==13.0.2")]
    other = dataclasses.replace(CUDA13_WHEELS, nvcc="/usr/local/cuda-12.4/bin/nvcc",
                                nvcc_version="12.4.131")
    assert _flow(monkeypatch, other, [CUDA13_WHEELS]) == calls
    assert _flow(monkeypatch, CUDA13_WHEELS, []) == []


def test_no_toolkit_wheel_is_one_line_naming_the_pin(monkeypatch) -> None:
    def fail(log, *args, **kw):
        raise build.StepFailed("pip install failed")

    monkeypatch.setattr(install, "pip", fail)
    missing = dataclasses.replace(CUDA13_WHEELS, nvcc=None)
    with pytest.raises(build.StepFailed, match=r"no cuda-toolkit\[nvcc,cccl,crt,nvvm\]==13\.0\.2 "
                                               r"from pip .*load a CUDA toolkit"):
        install._complete(missing, Request(cuda="torch"), Path(os.devnull))


def test_too_little_disk_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(build.StepFailed, match=r"GiB free in .*the build needs \d+ GiB"):
        install._need_space(tmp_path, 1 << 60, "the build")


# --- nvcc in PyPI's layout, staged as one CUDA home -----------------------------------------

def _fake_nvcc(path: Path, release: str = "13.0") -> Path:
    """An nvcc that answers --version and --list-gpu-arch, and refuses a host compiler whose
    path contains "too-new" the way crt/host_config.h does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""#!/bin/sh
case "$1" in
  --version) echo "Cuda compilation tools, release {release}, V{release}.88" ;;
  --list-gpu-arch) printf 'compute_75\\ncompute_80\\ncompute_90\\n' ;;
  *) case "$*" in *too-new*) echo "#error -- unsupported GNU version! gcc versions later than \
15 are not supported! The nvcc flag ..." >&2; exit 1 ;; esac ;;
esac
""")
    path.chmod(0o755)
    return path


def _cuda13_wheels(site: Path) -> Path:
    top = site / "nvidia" / "cu13"
    nvcc = _fake_nvcc(top / "bin" / "nvcc")
    (top / "bin" / "crt").mkdir()
    (top / "bin" / "crt" / "link.stub").write_text("")
    (top / "include" / "cccl" / "thrust").mkdir(parents=True)
    (top / "include" / "cuda_runtime.h").write_text("")
    (top / "lib").mkdir()
    for name in ("libcudart.so.13", "libcudart_static.a", "libnvrtc.so.13"):
        (top / "lib" / name).write_text(name)
    (top / "nvvm" / "bin").mkdir(parents=True)
    (site / "nvidia" / "nccl" / "lib").mkdir(parents=True)
    return nvcc


def test_a_cuda_13_wheel_toolkit_is_staged_as_one_cuda_home(tmp_path: Path) -> None:
    nvcc = _cuda13_wheels(tmp_path / "site")
    assert cuda_wheels.wheel_nvcc([tmp_path / "site" / "nvidia"]) == nvcc
    home = cuda_wheels.stage_toolkit(nvcc, tmp_path / "cuda")
    bin_ = home / "bin"
    assert bin_.is_dir() and not bin_.is_symlink()  # nvcc resolves ../lib64 from here
    assert (bin_ / "nvcc").resolve() == nvcc and (bin_ / "crt" / "link.stub").exists()
    lib64 = home / "lib64"
    assert (lib64 / "libcudart.so").resolve().name == "libcudart.so.13"  # what -lcudart needs
    assert (lib64 / "libcudart_static.a").exists() and (home / "lib").resolve() == lib64
    assert (home / "include" / "cuda_runtime.h").exists()
    assert (home / "include" / "cccl" / "thrust").is_dir()
    assert (home / "nvvm" / "bin").is_dir()


def test_a_cuda_12_wheel_toolkit_merges_its_per_library_wheels(tmp_path: Path) -> None:
    nvidia = tmp_path / "site" / "nvidia"
    nvcc = _fake_nvcc(nvidia / "cuda_nvcc" / "bin" / "nvcc", "12.8")
    (nvidia / "cuda_nvcc" / "include" / "crt").mkdir(parents=True)
    (nvidia / "cuda_nvcc" / "include" / "crt" / "host_config.h").write_text("")
    (nvidia / "cuda_nvcc" / "nvvm" / "bin").mkdir(parents=True)
    (nvidia / "cuda_runtime" / "include").mkdir(parents=True)
    (nvidia / "cuda_runtime" / "include" / "cuda_runtime.h").write_text("")
    (nvidia / "cuda_runtime" / "lib").mkdir()
    (nvidia / "cuda_runtime" / "lib" / "libcudart.so.12").write_text("")
    (nvidia / "cuda_cccl" / "include" / "thrust").mkdir(parents=True)
    home = cuda_wheels.stage_toolkit(nvcc, tmp_path / "cuda")
    for header in ("crt/host_config.h", "cuda_runtime.h", "thrust"):
        assert (home / "include" / header).exists(), header
    assert (home / "lib64" / "libcudart.so").resolve().name == "libcudart.so.12"
    assert (home / "nvvm" / "bin").is_dir()


def test_a_toolkit_without_the_runtime_headers_is_named(tmp_path: Path) -> None:
    nvcc = _fake_nvcc(tmp_path / "nvidia" / "cu13" / "bin" / "nvcc")
    with pytest.raises(FileNotFoundError, match="nvidia-cuda-runtime"):
        cuda_wheels.stage_toolkit(nvcc, tmp_path / "cuda")


def test_the_probe_takes_the_wheels_nvcc_first_only_with_cuda(tmp_path: Path,
                                                              monkeypatch) -> None:
    nvcc = _cuda13_wheels(tmp_path / "site")
    system = _fake_nvcc(tmp_path / "usr" / "bin" / "nvcc", "12.4")
    monkeypatch.setattr(cuda_wheels, "nvidia_roots", lambda: [tmp_path / "site" / "nvidia"])
    monkeypatch.setenv("PATH", f"{system.parent}:{os.environ['PATH']}")
    for name in ("HOROVOD_CUDA_HOME", "CUDA_HOME"):
        monkeypatch.delenv(name, raising=False)
    found = probe._nvcc(True, shutil.which("true"))
    assert found["nvcc"] == str(nvcc) and found["nvcc_version"] == "13.0.88"
    assert found["nvcc_archs"] == (75, 80, 90) and found["nvcc_host_error"] is None
    assert probe._nvcc(False, None)["nvcc"] == str(system)


def test_the_probe_reads_nvccs_refusal_of_the_host_compiler(tmp_path: Path) -> None:
    nvcc = _fake_nvcc(tmp_path / "bin" / "nvcc")
    assert probe.host_error(str(nvcc), "/opt/too-new/bin/g++") == \
        "gcc versions later than 15 are not supported"
    assert probe.host_error(str(nvcc), "/usr/bin/g++") is None


def test_build_env_points_cuda_home_at_the_staged_wheels(tmp_path: Path, monkeypatch) -> None:
    nvcc = _cuda13_wheels(tmp_path / "site")
    built = plan(dataclasses.replace(CUDA13_WHEELS, nvcc=str(nvcc)), Request(cuda="torch"))
    monkeypatch.setattr(build, "stage_nccl", lambda plan, home: home)
    (tmp_path / "build").mkdir()
    env = build.build_env(built, tmp_path / "build")
    assert env["HOROVOD_CUDA_HOME"] == env["CUDA_HOME"] == str(tmp_path / "build" / "cuda")
    assert (Path(env["CUDA_HOME"]) / "bin" / "nvcc").resolve() == nvcc


# --- the wheel: stripped, cached, exported ----------------------------------------------------

@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("strip")), reason="no gcc/strip")
def test_strip_keeps_the_code_drops_debug_info_and_rewrites_record(tmp_path: Path) -> None:
    source = tmp_path / "lib.c"
    source.write_text("int answer(void) { return 42; }\n")
    library = tmp_path / "lib.so"
    subprocess.run(["gcc", "-g3", "-shared", "-fPIC", str(source), "-o", str(library)],
                   check=True)
    wheel = tmp_path / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("horovod/__init__.py", "")
        archive.write(library, "horovod/torch/mpi_lib_v2.cpython-311-x86_64-linux-gnu.so")
        archive.writestr("horovod-0.28.1.dist-info/RECORD",
                         "horovod/__init__.py,sha256=x,0\nhorovod/torch/mpi_lib_v2.cpython-311-"
                         "x86_64-linux-gnu.so,sha256=x,1\nhorovod-0.28.1.dist-info/RECORD,,\n")
    stripped = build.strip_wheel(wheel, tmp_path / "out")
    assert stripped is not None and stripped.name == wheel.name
    with zipfile.ZipFile(stripped) as archive:
        names = archive.namelist()
        record = archive.read("horovod-0.28.1.dist-info/RECORD").decode().splitlines()
        for line in record[:-1]:
            name, digest, size = line.rsplit(",", 2)
            data = archive.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert (digest, int(size)) == (f"sha256={expected.decode()}", len(data))
        so = archive.read(names[1])
    assert len(so) < library.stat().st_size
    check = tmp_path / "check.so"
    check.write_bytes(so)
    assert b".debug_info" not in subprocess.run(["readelf", "-S", str(check)],
                                                capture_output=True).stdout
    assert "answer" in subprocess.run(["nm", "-D", str(check)], capture_output=True,
                                      text=True).stdout


KEY = "horovod0.28.1-torch2.11.0+cu130-cuda13.0-sm90-nccl2.28.9-cp312-{cc}-x86_64-r2"


def _published(root: Path, compiler: str) -> Path:
    wheel = root.parent / f"w-{compiler}" / "horovod-0.28.1-cp312-cp312-linux_x86_64.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_text(compiler)
    return cache.publish(root, KEY.format(cc=compiler), wheel)


def test_a_wheel_of_an_older_gcc_serves_a_newer_one_not_the_reverse(tmp_path: Path) -> None:
    root = tmp_path / "wheelhouse"
    _published(root, "gcc12.2.0")
    _published(root, "gcc11.4.0")
    _published(root, "gcc14.2.0")
    _published(root, "clang13.0.0")
    found = cache.lookup_compatible(root, KEY.format(cc="gcc13.3.0"))
    assert found is not None and found.read_text() == "gcc12.2.0"  # the newest that runs
    assert cache.lookup_compatible(root, KEY.format(cc="gcc10.5.0")) is None
    assert cache.lookup_compatible(root, KEY.format(cc="gcc14.2.0")).read_text() == "gcc14.2.0"
    other_torch = KEY.replace("torch2.11.0", "torch2.13.0").format(cc="gcc13.3.0")
    assert cache.lookup_compatible(root, other_torch) is None


def test_a_cached_wheel_is_installed_and_exported_to_the_wheelhouse(tmp_path: Path,
                                                                     monkeypatch) -> None:
    monkeypatch.setenv("HPO_WHEEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HPO_HOROVOD_WHEELS", raising=False)
    cached = _published(tmp_path / "cache", "gcc12.2.0")
    installed: list[Path] = []
    monkeypatch.setattr(install, "_install_wheel", lambda wheel, log: installed.append(wheel))
    built = dataclasses.replace(plan(CUDA13), key=KEY.format(cc="gcc13.3.0"))
    source = install._install(built, Path(os.devnull), False, tmp_path / "wh")
    assert installed == [cached] and source.startswith(f"cached {cached}")
    exported = tmp_path / "wh" / "horovod" / KEY.format(cc="gcc12.2.0") / cached.name
    assert exported.read_text() == "gcc12.2.0" and str(exported) in source


# --- one NCCL ---------------------------------------------------------------------------------

@pytest.mark.skipif(not shutil.which("gcc"), reason="no gcc here")
def test_one_nccl_means_one_library_of_the_headers_version(tmp_path: Path) -> None:
    source = tmp_path / "nccl.c"
    source.write_text("int ncclGetVersion(int* v) { *v = 22809; return 0; }\n")
    library = tmp_path / "libnccl.so.2"
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    assert verify.one_nccl(22809, [str(library)]) is None
    assert "built with nccl.h 2.27.3 but loads NCCL 2.28.9" in verify.one_nccl(22703,
                                                                               [str(library)])
    assert "two NCCL libraries" in verify.one_nccl(22809, [str(library), "/usr/lib/libnccl.so.2"])
    assert verify.one_nccl(0, []) is None  # a CPU build has none


# --- the command ------------------------------------------------------------------------------

def test_the_cli_registers_install_without_importing_torch_or_ray() -> None:
    code = ("import sys, hpo.cli; from hpo.cli import app; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray'}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
    helped = subprocess.run([sys.executable, "-m", "hpo", "install", "horovod", "--help"],
                            capture_output=True, text=True, cwd=ROOT)
    assert helped.returncode == 0 and "--cuda [VERSION]" in helped.stdout
    assert "--wheelhouse DIR" in helped.stdout and "--arch LIST" in helped.stdout


def test_cuda_on_this_cpu_torch_is_refused_before_building(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.version.cuda:
        pytest.skip("torch here is a CUDA build")
    log = tmp_path / "build.log"
    run = subprocess.run([sys.executable, "-m", "hpo", "install", "horovod", "--cuda", "12.x"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env={**os.environ, "HPO_HOROVOD_LOG": str(log)})
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "has no CUDA" in run.stderr
    assert "pip install" not in log.read_text()  # nothing installed, nothing built
