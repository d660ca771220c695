"""`hpo install horovod`'s decisions, per toolchain, without the toolchains: the pure
hpo.install.horovod.plan.decide() for GCC 12-14, CMake 3/4, CUDA 12/13, ROCm 5/6 and NCCL from a
wheel or the system; the probe against fake NCCL installs (a real shared library with
ncclGetVersion); the wheel cache under concurrent publishers; the offline wheelhouse helpers.
--cuda/--arch and PyPI's CUDA wheels: tests/install/test_install_cuda_wheels.py; the real CUDA
build:
tests/install/test_install_cuda.py (slow); the installer from an installed hpo wheel:
tests/install/test_install_packaged.py."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from horovod_toolchains import (
    CPU,
    CUDA12,
    CUDA13,
    ROCM5,
    SYSTEM_NCCL,
    WHEEL_LIB,
    WHEEL_NCCL,
    plan,
    refusal,
)

from hpo.install import wheelhouse
from hpo.install.horovod import build, cache, cuda, failures, nccl, probe
from hpo.install.horovod import plan as hb
from hpo.install.horovod.plan import decide
from hpo.install.horovod.toolchain import BuildPlan, BuildRefusal, Nccl

ROOT = Path(__file__).resolve().parents[2]

# --- compiler and CMake -------------------------------------------------------------------

@pytest.mark.parametrize("gcc", ["12.2.0", "13.3.0", "14.2.0"])
def test_gcc_12_to_14_build_with_the_force_includes_and_the_cxx17_wrapper(gcc: str) -> None:
    built = plan(dataclasses.replace(CPU, cxx_version=gcc))
    assert built.cxxflags == "-include cstdint -include string -include stdexcept"
    assert built.cxx == "/usr/bin/g++"
    assert f"gcc{gcc}" in built.key
    assert "HOROVOD_GPU_OPERATIONS" not in built.env and built.env["HOROVOD_WITH_GLOO"] == "1"


@pytest.mark.parametrize(("cxx_id", "version"), [("gcc", "8.5.0"), ("clang", "9.0.1")])
def test_a_compiler_too_old_for_torch_is_refused(cxx_id: str, version: str) -> None:
    reason = refusal(dataclasses.replace(CPU, cxx_id=cxx_id, cxx_version=version))
    assert f"{cxx_id} {version}" in reason and "too old" in reason


def test_no_compiler_and_no_torch_are_refused() -> None:
    assert "no C++ compiler" in refusal(dataclasses.replace(CPU, cxx=None))
    assert "torch is not installed" in refusal(dataclasses.replace(CPU, torch=None))


def test_cmake_3_is_used_as_found_and_cmake_4_gets_the_policy_minimum() -> None:
    old = plan(CPU)
    assert old.env["HOROVOD_CMAKE"] == "/usr/bin/cmake"
    assert "CMAKE_POLICY_VERSION_MINIMUM" not in old.env
    new = plan(dataclasses.replace(CPU, cmake="/home/u/.local/bin/cmake", cmake_version="4.1.2"))
    assert new.env["HOROVOD_CMAKE"] == "/home/u/.local/bin/cmake"
    assert new.env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"


def test_missing_or_old_cmake_is_refused() -> None:
    assert "cmake not found" in refusal(dataclasses.replace(CPU, cmake=None))
    assert "3.10.2" in refusal(dataclasses.replace(CPU, cmake_version="3.10.2"))


# --- CUDA ---------------------------------------------------------------------------------

def test_cuda_13_builds_nccl_from_the_wheel_torch_loads_for_torchs_archs() -> None:
    built = plan(CUDA13)
    assert built.env["HOROVOD_GPU"] == "CUDA"
    assert built.env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert built.env["HOROVOD_CUDA_HOME"] == "/usr/local/cuda-13.0"
    assert built.env["HOROVOD_BUILD_CUDA_CC_LIST"] == "75,80,86,90,100,120"
    assert built.env["HOROVOD_NCCL_LINK"] == "SHARED"
    assert built.env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
    assert built.nccl == WHEEL_NCCL  # header and library both from the wheel
    assert "cuda13.0-sm75.80.86.90.100.120-nccl2.27.3" in built.key


def test_cuda_12_drops_the_archs_its_nvcc_cannot_build() -> None:
    built = plan(CUDA12)
    assert built.env["HOROVOD_BUILD_CUDA_CC_LIST"] == "50,80,90"  # nvcc 12.4 lacks sm_100
    assert built.env["HOROVOD_CUDA_HOME"] == "/usr/local/cuda-12.4"
    assert "CMAKE_POLICY_VERSION_MINIMUM" not in built.env


def test_the_users_arch_list_wins_over_torchs() -> None:
    assert plan(dataclasses.replace(CUDA13, arch_env="9.0"))\
        .env["HOROVOD_BUILD_CUDA_CC_LIST"] == "90"
    assert plan(dataclasses.replace(CUDA13, arch_env="9.0", cc_env="80,90"))\
        .env["HOROVOD_BUILD_CUDA_CC_LIST"] == "80,90"
    assert "sm90-" in plan(dataclasses.replace(CUDA13, arch_env="Hopper")).key


@pytest.mark.parametrize(("entries", "numbers"), [
    (["sm_90a", "compute_120", "sm_80"], [80, 90, 120]),
    (["8.6+PTX", "9.0a", "7.5"], [75, 86, 90]),
    (["Ampere", "hopper"], [80, 86, 90]),
    (["90", "bogus", ""], [90]),
])
def test_arch_entries_parse_to_compute_capabilities(entries: list[str], numbers: list[int]) -> None:
    assert cuda._arch_numbers(entries) == numbers


def test_no_buildable_arch_is_refused() -> None:
    assert "none of the CUDA archs" in refusal(dataclasses.replace(CUDA13, arch_env="5.0"))
    assert "no CUDA architecture" in refusal(dataclasses.replace(CUDA13, torch_archs=()))


def test_cuda_torch_without_nvcc_is_refused_naming_the_ddp_fallback() -> None:
    reason = refusal(dataclasses.replace(CUDA13, nvcc=None))
    assert reason.startswith("nvcc not found") and "CUDA 13" in reason and "ddp" in reason


def test_nvcc_of_another_cuda_major_is_refused() -> None:
    reason = refusal(dataclasses.replace(CUDA13, nvcc_version="12.4.131"))
    assert "12.4.131" in reason and "13.0" in reason


# --- NCCL: one install for header and library ----------------------------------------------

def test_torch_loading_the_system_nccl_builds_against_the_system_one() -> None:
    built = plan(dataclasses.replace(CUDA13, nccl_loaded=SYSTEM_NCCL.library))
    assert built.nccl == SYSTEM_NCCL and "nccl2.21.5" in built.key


def test_a_wheel_without_its_header_is_not_completed_from_the_system() -> None:
    headless = dataclasses.replace(WHEEL_NCCL, include_dir=None, header_version=None)
    reason = refusal(dataclasses.replace(CUDA13, nccl_wheel=headless))
    assert "no nccl.h" in reason and WHEEL_LIB in reason


def test_nccl_header_library_mismatch_is_refused() -> None:
    mixed = dataclasses.replace(SYSTEM_NCCL, header_version="2.18.1")
    reason = refusal(dataclasses.replace(CUDA13, nccl_loaded=None, nccl_wheel=None,
                                         nccl_system=mixed))
    assert "mismatch" in reason and "2.18.1" in reason and "2.21.5" in reason


def test_nccl_torch_loads_but_nothing_matches_is_refused() -> None:
    reason = refusal(dataclasses.replace(CUDA13, nccl_loaded="/opt/other/libnccl.so.2.19.3"))
    assert "/opt/other/libnccl.so.2.19.3" in reason


def test_without_a_loaded_nccl_the_wheel_comes_before_the_system() -> None:
    assert plan(dataclasses.replace(CUDA13, nccl_loaded=None)).nccl == WHEEL_NCCL
    only_system = dataclasses.replace(CUDA13, nccl_loaded=None, nccl_wheel=None)
    assert plan(only_system).nccl == SYSTEM_NCCL
    none = dataclasses.replace(only_system, nccl_system=None)
    assert "pip install 'nvidia-nccl-cu13==<the version torch requires>'" in refusal(none)
    pinned = dataclasses.replace(none, nccl_pin="nvidia-nccl-cu13==2.28.9")
    assert "pip install 'nvidia-nccl-cu13==2.28.9'" in refusal(pinned)  # never PyPI's newest


# --- ROCm ---------------------------------------------------------------------------------

def test_rocm_5_builds_with_rccl() -> None:
    built = plan(ROCM5)
    assert built.env["HOROVOD_GPU"] == "ROCM" and built.env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert built.env["HOROVOD_ROCM_HOME"] == "/opt/rocm-5.7.1"
    assert built.nccl is None and "rocm5.7.1" in built.key


def test_rocm_6_is_refused_naming_the_ddp_fallback() -> None:
    rocm6 = dataclasses.replace(ROCM5, torch="2.13.0+rocm6.4", torch_hip="6.4.43482",
                                rocm_path="/opt/rocm-6.4.1", rocm_version="6.4.1")
    reason = refusal(rocm6)
    assert "ROCm 6.4.1" in reason and "hip_add_library" in reason
    assert "distributed: {backend: ddp}" in reason


def test_rocm_missing_or_of_another_major_is_refused() -> None:
    assert "ROCm not found" in refusal(dataclasses.replace(ROCM5, rocm_path=None))
    assert "does not match" in refusal(dataclasses.replace(ROCM5, rocm_version="6.0.2"))


# --- cache key ----------------------------------------------------------------------------

def test_the_cache_key_changes_with_everything_the_binary_depends_on() -> None:
    base = plan(CUDA13).key
    assert plan(CUDA13).key == base
    assert plan(dataclasses.replace(CUDA13, python="3.12.9")).key == base  # same ABI
    assert plan(dataclasses.replace(CUDA13, cmake_version="3.31.0")).key == base
    changed = [
        dataclasses.replace(CUDA13, python="3.13.1"),
        dataclasses.replace(CUDA13, torch="2.11.1+cu130"),
        dataclasses.replace(CUDA13, cxx_version="14.2.0"),
        dataclasses.replace(CUDA13, cxx_id="clang", cxx_version="13.3.0"),
        dataclasses.replace(CUDA13, arch_env="9.0"),
        dataclasses.replace(CUDA13, nccl_loaded=SYSTEM_NCCL.library),
        dataclasses.replace(CUDA13, machine="aarch64"),
    ]
    keys = {plan(found).key for found in changed}
    assert len(keys) == len(changed) and base not in keys
    assert all(set(key) <= set("abcdefghijklmnopqrstuvwxyz0123456789.+_-") for key in keys)


def test_the_cache_key_names_the_horovod_version_and_recipe(monkeypatch) -> None:
    before = plan(CPU).key
    monkeypatch.setattr(hb, "HOROVOD_VERSION", "0.29.0")
    assert "horovod0.29.0" in plan(CPU).key and plan(CPU).key != before
    monkeypatch.setattr(hb, "RECIPE", hb.RECIPE + 1)
    assert plan(CPU).key.endswith(f"-r{hb.RECIPE}")


# --- failure lines ------------------------------------------------------------------------

@pytest.mark.parametrize(("log", "phrase"), [
    ("CMake Error at third_party/gloo/CMakeLists.txt:1 (cmake_minimum_required):\n"
     "  Compatibility with CMake < 3.5 has been removed from CMake.", "CMake 4"),
    ("horovod/common/group_table.h:34:8: error: 'string' in namespace 'std' does not name a type",
     "string is undeclared"),
    ("common.h:120:3: error: ‘logic_error’ is not a member of ‘std’", "logic_error is undeclared"),
    ("foo.cc:3:10: fatal error: nccl.h: No such file or directory", "missing header nccl.h"),
    ("#error -- unsupported GNU version! gcc versions later than 13 are not supported!",
     "nvcc does not support this GNU compiler"),
    ("OSError: [Errno 28] No space left on device", "the disk is full"),
    ("g++: fatal error: Killed signal terminated program cc1plus", "out of memory"),
    ("CMake Error at CMakeLists.txt:223 (find_package):\n  By not providing FindRCCL",
     "CMake error at CMakeLists.txt:223 (find_package): By not providing FindRCCL"),
    ("  ERROR: No matching distribution found for cffi>=1.4.0\n"
     "error: subprocess-exited-with-error", "pip found no cffi>=1.4.0 (offline"),
    ("error: subprocess-exited-with-error\n", "no known cause"),
    ("all fine\nnothing here", "no known cause"),
])
def test_a_failed_build_is_summed_up_in_one_line(log: str, phrase: str) -> None:
    line = failures.summarize_failure(log)
    assert phrase in line and "\n" not in line


# --- the build environment ----------------------------------------------------------------

def test_build_env_stages_one_nccl_and_puts_its_header_first(tmp_path: Path, monkeypatch) -> None:
    wheel = tmp_path / "site" / "nvidia" / "nccl"
    (wheel / "include").mkdir(parents=True)
    (wheel / "lib").mkdir()
    (wheel / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n")
    (wheel / "lib" / "libnccl.so.2").write_text("")
    nccl = Nccl("wheel", str(wheel / "include"), "2.27.3", str(wheel / "lib" / "libnccl.so.2"),
                "2.27.3")
    built = plan(dataclasses.replace(CUDA13, nccl_loaded=nccl.library, nccl_wheel=nccl))
    monkeypatch.setenv("CXXFLAGS", "-O2")
    monkeypatch.delenv("MAKEFLAGS", raising=False)
    env = build.build_env(built, tmp_path)
    home = Path(env["HOROVOD_NCCL_HOME"])
    assert (home / "include" / "nccl.h").resolve() == wheel / "include" / "nccl.h"
    assert (home / "lib" / "libnccl.so").resolve() == wheel / "lib" / "libnccl.so.2"
    assert env["HOROVOD_NCCL_INCLUDE"] == str(home / "include")
    assert env["HOROVOD_NCCL_LIB"] == str(home / "lib")
    assert env["CXXFLAGS"] == f"-O2 {hb.FORCE_INCLUDES} -I{home / 'include'}"
    assert env["HOROVOD_BUILD_CUDA_CC_LIST"] == "75,80,86,90,100,120"
    assert env["MAKEFLAGS"].startswith("-j")


def test_the_cxx_wrapper_raises_cxx14_to_cxx17(tmp_path: Path) -> None:
    echo = tmp_path / "echo-args"
    echo.write_text('#!/bin/sh\necho "$@"\n')
    echo.chmod(0o755)
    env = build.build_env(dataclasses.replace(plan(CPU), cxx=str(echo)), tmp_path)
    run = subprocess.run([env["CXX"], "-std=c++14", "-O2", "-std=gnu++14", "a b.cc"],
                         capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["-std=gnu++17", "-O2", "-std=gnu++17", "a", "b.cc"]


@pytest.mark.skipif(not shutil.which("g++"), reason="no g++ here")
def test_this_gcc_accepts_the_force_includes_horovod_needs(tmp_path: Path) -> None:
    """What GCC 13 rejects in Horovod 0.28.1, with no includes; the flags make it compile."""
    source = tmp_path / "needs.cc"
    source.write_text("struct T { std::string name; uint8_t byte; };\n"
                      "void f() { throw std::logic_error(\"x\"); }\n")
    env = build.build_env(plan(CPU), tmp_path)
    compile_ = [env["CXX"], "-std=c++14", "-c", str(source), "-o", str(tmp_path / "o.o")]
    assert subprocess.run(compile_, capture_output=True).returncode != 0
    flags = hb.FORCE_INCLUDES.split()
    subprocess.run(compile_ + flags, check=True)


# --- the probe, against fake NCCL installs -------------------------------------------------

def _fake_nccl(folder: Path, header: str, library: int) -> Path:
    """folder/include/nccl.h of version `header`, folder/lib/libnccl.so.2 returning `library`."""
    (folder / "include").mkdir(parents=True)
    (folder / "lib").mkdir()
    major, minor, patch = header.split(".")
    (folder / "include" / "nccl.h").write_text(
        f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n")
    source = folder / "nccl.c"
    source.write_text(f"int ncclGetVersion(int* v) {{ *v = {library}; return 0; }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o",
                    str(folder / "lib" / "libnccl.so.2")], check=True)
    return folder / "lib" / "libnccl.so.2"


@pytest.mark.skipif(not shutil.which("gcc"), reason="no gcc here")
def test_probe_reads_the_wheels_nccl_and_its_header(tmp_path: Path, monkeypatch) -> None:
    library = _fake_nccl(tmp_path / "site" / "nvidia" / "nccl", "2.27.3", 22703)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    sys.modules.pop("nvidia", None)
    found = nccl.nccl_wheel()
    assert found == Nccl("wheel", str(library.parent.parent / "include"), "2.27.3",
                         str(library), "2.27.3")
    loaded = dataclasses.replace(CUDA13, nccl_loaded=str(library), nccl_wheel=found)
    assert plan(loaded).nccl == found


@pytest.mark.skipif(not shutil.which("gcc"), reason="no gcc here")
def test_probe_finds_a_system_nccl_whose_header_is_another_version(tmp_path: Path,
                                                                    monkeypatch) -> None:
    library = _fake_nccl(tmp_path / "nccl", "2.18.1", 22105)
    monkeypatch.setenv("HOROVOD_NCCL_HOME", str(tmp_path / "nccl"))
    for name in ("HOROVOD_NCCL_LIB", "HOROVOD_NCCL_INCLUDE", "NCCL_HOME", "CUDA_HOME"):
        monkeypatch.delenv(name, raising=False)
    found = nccl.nccl_system(None, None)
    assert found is not None and found.library == str(library)
    assert (found.header_version, found.library_version) == ("2.18.1", "2.21.5")
    reason = refusal(dataclasses.replace(CUDA13, nccl_loaded=None, nccl_wheel=None,
                                         nccl_system=found))
    assert "mismatch" in reason


@pytest.mark.skipif(not shutil.which("gcc"), reason="no gcc here")
def test_probe_sees_which_nccl_file_the_process_has_loaded(tmp_path: Path) -> None:
    library = _fake_nccl(tmp_path / "loaded", "2.27.3", 22703)
    code = ("import ctypes, sys; from hpo.install.horovod.nccl import loaded_library; "
            "ctypes.CDLL(sys.argv[1]); print(loaded_library('libnccl'))")
    run = subprocess.run([sys.executable, "-c", code, str(library)],
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == str(library)


def test_probe_of_this_python_is_a_complete_toolchain() -> None:
    found = probe.probe()
    assert found.python.startswith(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert isinstance(decide(found), (BuildPlan, BuildRefusal))


def test_install_without_torch_is_one_line_naming_the_log(tmp_path: Path) -> None:
    """A bare Python (no torch, no pip, not even hpo's dependencies) gets the one line: the
    installer imports nothing but the standard library and itself before deciding."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True)
    log = tmp_path / "build.log"
    run = subprocess.run([str(tmp_path / "bare" / "bin" / "python"), "-m", "hpo.install",
                          "horovod"], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "HPO_HOROVOD_LOG": str(log), "PYTHONPATH": str(ROOT)})
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1 and "torch is not installed" in run.stderr
    assert str(log) in run.stderr and '"toolchain"' in log.read_text()


# --- the wheel cache ----------------------------------------------------------------------

def _stub_build(root: Path, key: str, index: int, size: int, barrier, results) -> None:
    """A build that ends with `size` bytes of its own index, then publishes with the others."""
    scratch = root.parent / f"scratch-{index}"
    scratch.mkdir()
    wheel = scratch / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(bytes([index]) * size)
    barrier.wait()
    results.put(str(cache.publish(root, key, wheel)))


def _watch(root: Path, key: str, size: int, stop, bad) -> None:
    while not stop.is_set():
        wheel = cache.lookup(root, key)
        if wheel is not None:
            data = wheel.read_bytes()
            if len(data) != size or len(set(data)) != 1:
                bad.value += 1


def test_concurrent_publishers_leave_one_whole_wheel(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")  # no fork of a process that loaded torch
    root, key, size, jobs = tmp_path / "cache", "horovod0.28.1-test", 4_000_000, 6
    barrier, stop, bad = context.Barrier(jobs), context.Event(), context.Value("i", 0)
    results = context.Queue()
    watcher = context.Process(target=_watch, args=(root, key, size, stop, bad))
    builds = [context.Process(target=_stub_build, args=(root, key, i, size, barrier, results))
              for i in range(jobs)]
    for process in [watcher, *builds]:
        process.start()
    published = [results.get(timeout=60) for _ in builds]
    for process in builds:
        process.join(timeout=60)
        assert process.exitcode == 0
    stop.set()
    watcher.join(timeout=60)
    assert len(set(published)) == 1  # every job installs the same, first-published wheel
    assert bad.value == 0  # no reader ever saw a partial or mixed wheel
    assert [p.name for p in root.iterdir()] == [key]  # no temporary folders left behind
    (wheel,) = (root / key).iterdir()
    assert len(set(wheel.read_bytes())) == 1 and wheel.stat().st_size == size


def test_publish_keeps_the_first_and_discard_removes_it(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first, second = tmp_path / "a" / "horovod-1.whl", tmp_path / "b" / "horovod-1.whl"
    for wheel, text in ((first, "first"), (second, "second")):
        wheel.parent.mkdir()
        wheel.write_text(text)
    cached = cache.publish(root, "k", first)
    assert cache.publish(root, "k", second) == cached
    assert cached.read_text() == "first" and cache.lookup(root, "other") is None
    cache.discard(root, "k")
    assert cache.lookup(root, "k") is None and list(root.iterdir()) == []
    assert cache.publish(root, "k", second).read_text() == "second"


def test_cache_root_follows_hpo_wheel_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HPO_WHEEL_CACHE", str(tmp_path))
    assert cache.cache_root() == tmp_path
    monkeypatch.delenv("HPO_WHEEL_CACHE")
    assert cache.cache_root() == Path.home() / ".cache" / "hpo" / "wheels"


# --- offline: the wheelhouse --------------------------------------------------------------

def test_wheelhouse_downloads_the_projects_dependencies_and_horovods_sdist(monkeypatch) -> None:
    args = wheelhouse.argparse.Namespace(python_version="3.12", platform=["manylinux_2_28_x86_64"],
                                         torch=None, extra_index_url=["https://example.org/cu130"])
    monkeypatch.delenv("HPO_TORCH_VERSION", raising=False)
    binary, sdist = wheelhouse.download_commands(Path("/wh"), args)
    assert {"--only-binary=:all:", "--python-version", "3.12", "manylinux_2_28_x86_64"} \
        <= set(binary)
    for wanted in ("ray[tune]>=2.58,<2.61", "optuna>=4", "pytest>=8", "setuptools>=68", "cmake",
                   "psutil", "cloudpickle", "cffi"):  # Horovod's setup_requires, offline too
        assert wanted in binary
    assert [arg for arg in binary if arg.startswith("torch")] == ["torch==2.13.0"]  # as setup.sh
    assert binary[binary.index("--extra-index-url") + 1] == "https://example.org/cu130"
    monkeypatch.setenv("HPO_TORCH_VERSION", "2.11.0")
    assert "torch==2.11.0" in wheelhouse.download_commands(Path("/wh"), args)[0]
    assert sdist[-3:] == ["--no-binary=:all:", "--no-deps", "horovod==0.28.1"]


def test_trimming_ray_drops_files_and_their_record_lines(tmp_path: Path) -> None:
    wheel = tmp_path / "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("ray/tune/__init__.py", "tune")
        archive.writestr("ray/rllib/big.py", "x" * 100_000)
        archive.writestr("ray/jars/ray.jar", "y" * 100_000)
        archive.writestr("ray-2.60.0.dist-info/RECORD",
                         "ray/tune/__init__.py,,\nray/rllib/big.py,,\nray/jars/ray.jar,,\n")
    assert wheelhouse.trim_wheel(wheel, wheelhouse.RAY_TRIM) > 0
    with zipfile.ZipFile(wheel) as archive:
        assert sorted(archive.namelist()) == ["ray-2.60.0.dist-info/RECORD",
                                              "ray/tune/__init__.py"]
        assert archive.read("ray-2.60.0.dist-info/RECORD") == b"ray/tune/__init__.py,,\n"


def test_wheelhouse_carries_the_cached_horovod_wheels(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HPO_WHEEL_CACHE", str(tmp_path / "cache"))
    built = tmp_path / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    built.write_text("wheel")
    cache.publish(tmp_path / "cache", "keyA", built)
    (tmp_path / "cache" / ".keyB.tmp").mkdir()  # someone's unfinished publish
    assert wheelhouse.copy_cached_horovod(tmp_path / "wh") == ["keyA"]
    assert cache.lookup(tmp_path / "wh" / "horovod", "keyA") is not None


def test_setup_refuses_a_missing_wheelhouse_before_touching_anything(tmp_path: Path) -> None:
    run = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--wheelhouse",
                          str(tmp_path / "absent")], capture_output=True, text=True)
    assert run.returncode == 2 and "--wheelhouse needs an existing folder" in run.stderr
    run = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--bogus"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "usage" in run.stderr
