"""Installs Horovod 0.28.1 into this Python, built against its torch (run by install-horovod.sh).

Probes the toolchain (horovod_probe), decides the build (horovod_build.decide), installs a
cached wheel of the same key when there is one (HPO_WHEEL_CACHE, then a wheelhouse's
HPO_HOROVOD_WHEELS), else builds one with `pip wheel`, publishes it to the cache and installs
it. pip's and the compilers' output goes to a log file; the terminal gets one line per step,
and on failure one line naming the cause and the log.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from horovod_build import HOROVOD_VERSION, BuildPlan, BuildRefusal, decide, summarize_failure
from horovod_cache import cache_root, discard, lookup, publish
from horovod_probe import probe

RUNTIME_DEPS = ("cloudpickle", "psutil", "pyyaml", "packaging", "cffi")
# Installed before building without build isolation: Horovod's setup.py imports packaging and
# lists its runtime deps as setup_requires, which setuptools would otherwise fetch itself.
BUILD_DEPS = ("setuptools", "wheel", *RUNTIME_DEPS)
CXX17_WRAPPER = """#!/usr/bin/env bash
# Horovod 0.28.1's CMake pins C++14; torch >= 2.1 headers need C++17.
args=()
for arg in "$@"; do
  case "$arg" in -std=c++14|-std=gnu++14) arg=-std=gnu++17 ;; esac
  args+=("$arg")
done
exec "{cxx}" "${{args[@]}}"
"""


class StepFailed(Exception):
    """A step failed; the message is the one line to print."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", action="store_true", help="print the toolchain and plan")
    parser.add_argument("--rebuild", action="store_true", help="build even if cached")
    args = parser.parse_args(argv)
    log = Path(os.environ.get("HPO_HOROVOD_LOG") or Path(sys.prefix, "horovod-build.log"))
    log.write_text("")
    started = time.monotonic()
    try:
        result = _plan(log, args.probe)
        if isinstance(result, BuildRefusal):
            print(f"install-horovod: {result.reason} (toolchain found: {log})", file=sys.stderr)
            return 1
        if args.probe:
            return 0
        print(f"install-horovod: {result.summary}")
        source = _install(result, log, args.rebuild)
        built = _verify(result)
    except StepFailed as failure:
        print(f"install-horovod: {failure}. Full log: {log}", file=sys.stderr)
        return 1
    print(f"install-horovod: {built} installed in {time.monotonic() - started:.0f} s "
          f"({source}; log {log})")
    return 0


def _plan(log: Path, only_print: bool) -> BuildPlan | BuildRefusal:
    """Probe and decide; the toolchain and the decision go to the log (or the terminal)."""
    found = probe()
    if found.torch and found.cmake is None and not only_print:
        _pip(log, "install", "cmake")  # none anywhere: the one pip has (CMake 4 is handled)
        found = probe()
    result = decide(found)
    report = json.dumps({"toolchain": dataclasses.asdict(found),
                         "decision": dataclasses.asdict(result)}, indent=2)
    with log.open("a") as out:
        out.write(report + "\n")
    if only_print:
        print(report)
    return result


def _install(plan: BuildPlan, log: Path, rebuild: bool) -> str:
    """Installs the cached wheel, else builds and caches one; says where it came from."""
    extra = os.environ.get("HPO_HOROVOD_WHEELS")
    if rebuild:
        discard(cache_root(), plan.key)
    else:
        for root in filter(None, (cache_root(), extra and Path(extra))):
            wheel = lookup(root, plan.key)
            if wheel:
                _install_wheel(wheel, log)
                return f"cached {wheel}"
    print(f"install-horovod: building (a few minutes; progress in {log})")
    with tempfile.TemporaryDirectory(prefix="hpo-horovod-") as tmp:
        wheel = _build(plan, Path(tmp), log)
        try:
            wheel = publish(cache_root(), plan.key, wheel)
            source = f"built, cached as {wheel}"
        except OSError as error:  # a read-only shared cache: install what was built anyway
            source = f"built, not cached: {error}"
        _install_wheel(wheel, log)
    return source


def _build(plan: BuildPlan, tmp: Path, log: Path) -> Path:
    _pip(log, "install", *BUILD_DEPS)
    start = log.stat().st_size
    # --verbose: the compilers' output goes to the log. --no-cache-dir: pip's own wheel cache
    # knows nothing of torch's version or CUDA.
    command = ("wheel", "--verbose", "--no-deps", "--no-build-isolation", "--no-cache-dir",
               "--no-binary", "horovod", "-w", str(tmp / "dist"), f"horovod=={HOROVOD_VERSION}")
    try:
        _pip(log, *command, env=build_env(plan, tmp))
    except StepFailed:
        output = log.read_bytes()[start:].decode(errors="replace")
        raise StepFailed(f"Horovod build failed: {summarize_failure(output)}") from None
    return next((tmp / "dist").glob("horovod-*.whl"))


def build_env(plan: BuildPlan, tmp: Path) -> dict[str, str]:
    env = {**os.environ, **plan.env}
    wrapper = tmp / "cxx17"
    wrapper.write_text(CXX17_WRAPPER.format(cxx=plan.cxx))
    wrapper.chmod(0o755)
    env["CXX"] = str(wrapper)
    flags = [os.environ.get("CXXFLAGS", ""), plan.cxxflags]
    if plan.nccl:
        home = stage_nccl(plan, tmp / "nccl")
        env.update(HOROVOD_NCCL_HOME=str(home), HOROVOD_NCCL_INCLUDE=str(home / "include"),
                   HOROVOD_NCCL_LIB=str(home / "lib"))
        # -I is searched before every -isystem: a CUDA toolkit's own nccl.h cannot win.
        flags.append(f"-I{home / 'include'}")
    env["CXXFLAGS"] = " ".join(flag for flag in flags if flag)
    env.setdefault("MAKEFLAGS", f"-j{len(os.sched_getaffinity(0))}")
    return env


def stage_nccl(plan: BuildPlan, home: Path) -> Path:
    """include/ and lib/libnccl.so of the one NCCL chosen: the nvidia-nccl wheel ships only
    libnccl.so.2, so Horovod's find_library(nccl) would otherwise take the system's."""
    assert plan.nccl and plan.nccl.include_dir and plan.nccl.library
    (home / "include").mkdir(parents=True)
    (home / "lib").mkdir()
    for header in Path(plan.nccl.include_dir).glob("nccl*.h"):
        (home / "include" / header.name).symlink_to(header)
    for name in ("libnccl.so", "libnccl.so.2"):
        (home / "lib" / name).symlink_to(plan.nccl.library)
    return home


def _install_wheel(wheel: Path, log: Path) -> None:
    _pip(log, "uninstall", "--yes", "horovod")
    _pip(log, "install", str(wheel))


def _verify(plan: BuildPlan) -> str:
    code = ("import horovod, horovod.torch as hvd; print(horovod.__version__, "
            "int(hvd.gloo_built()), int(hvd.nccl_built()), int(hvd.rocm_built()))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise StepFailed(f"import horovod.torch failed after installing: {last}")
    version, gloo, nccl, rocm = run.stdout.split()[-4:]
    parts = ["gloo"] * (gloo != "0") + [f"nccl {nccl}"] * (nccl != "0") + ["rocm"] * (rocm != "0")
    if gloo == "0" or ("HOROVOD_GPU_OPERATIONS" in plan.env and nccl == "0"):
        raise StepFailed(f"Horovod {version} installed without a planned part (has: {parts})")
    return f"horovod {version} ({', '.join(parts)})"


def _pip(log: Path, *args: str, env: dict[str, str] | None = None) -> None:
    with log.open("a") as out:
        out.write(f"\n$ pip {' '.join(args)}\n")
        out.flush()
        run = subprocess.run([sys.executable, "-m", "pip", *args], stdout=out,
                             stderr=subprocess.STDOUT, env=env)
    if run.returncode != 0 and args[0] != "uninstall":
        raise StepFailed(f"pip {args[0]} {args[-1]} failed")


if __name__ == "__main__":
    sys.exit(main())
