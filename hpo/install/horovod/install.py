"""Horovod 0.28.1 in this Python, built against its torch (`hpo install horovod`).

Probes the toolchain (probe.py), decides the build (plan.decide), installs a cached wheel of
the same key when there is one (HPO_WHEEL_CACHE, then --wheelhouse DIR or HPO_HOROVOD_WHEELS),
else builds one with `pip wheel`, strips it, publishes it to the cache and installs it. With
--cuda, nvcc comes from PyPI's wheels pinned to torch's CUDA (installed here when missing).
The terminal gets one line per step, and on failure one line naming the cause and the log.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from hpo.install.horovod import cache
from hpo.install.horovod.build import StepFailed, build_wheel, pip, strip_wheel
from hpo.install.horovod.cuda import WHEEL_NVCC, check_request
from hpo.install.horovod.plan import decide
from hpo.install.horovod.probe import probe
from hpo.install.horovod.toolchain import (
    BuildPlan,
    BuildRefusal,
    Request,
    Toolchain,
    version_tuple,
)
from hpo.install.horovod.verify import verify

NAME = "hpo install horovod"
GIB = 1 << 30
FREE_TO_BUILD = 2 * GIB  # TMPDIR: Horovod's build tree, debug info and all (CUDA: ~1 GB)
FREE_FOR_TOOLKIT = 1 * GIB  # this Python's prefix: nvcc, cicc, CCCL wheels take ~0.25 GB


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    parse.add_argument("--cuda", nargs="?", const="torch", metavar="VERSION",
                       help="a Gloo + NCCL build with nvcc from PyPI's CUDA wheels, pinned to "
                       "torch's CUDA (VERSION, e.g. 13 or 12.x, must be torch's major)")
    parse.add_argument("--arch", metavar="LIST", help="compute capabilities to build for, e.g. "
                       "80,90 (A100, H100; default: torch's own list)")
    parse.add_argument("--wheelhouse", type=Path, metavar="DIR", help="also look for the wheel "
                       "in DIR/horovod/ and put it there, for an offline node")
    parse.add_argument("--probe", action="store_true", help="print the toolchain and the plan")
    parse.add_argument("--rebuild", action="store_true", help="build even if cached")
    return parse


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    request = Request(cuda=args.cuda, archs=args.arch)
    log = Path(os.environ.get("HPO_HOROVOD_LOG") or Path(sys.prefix, "horovod-build.log"))
    log.write_text("")
    started = time.monotonic()
    try:
        result = _plan(log, request, args.probe)
        if isinstance(result, BuildRefusal):
            print(f"{NAME}: {result.reason} (toolchain found: {log})", file=sys.stderr)
            return 1
        if args.probe:
            return 0
        print(f"{NAME}: {result.summary}")
        source = _install(result, log, args.rebuild, args.wheelhouse)
        built = verify(result)
    except StepFailed as failure:
        print(f"{NAME}: {failure}. Full log: {log}", file=sys.stderr)
        return 1
    print(f"{NAME}: {built} installed in {time.monotonic() - started:.0f} s "
          f"({source}; log {log})")
    return 0


def _plan(log: Path, request: Request, only_print: bool) -> BuildPlan | BuildRefusal:
    """Probe and decide; the toolchain and the decision go to the log (or the terminal)."""
    found = probe(wheels_first=request.cuda is not None)
    reason = check_request(found, request) if found.torch else None
    if reason:
        return _report(log, found, BuildRefusal(reason), only_print)
    if not only_print:
        found = _complete(found, request, log)
    elif request.cuda and found.toolkit_pin and not _wheel_toolkit_matches(found):
        print(f"{NAME}: without --probe, {found.toolkit_pin} is installed first", file=sys.stderr)
    return _report(log, found, decide(found, request), only_print)


def _complete(found: Toolchain, request: Request, log: Path) -> Toolchain:
    """Installs what the build lacks and pip has: cmake; with --cuda the pinned toolkit wheels."""
    if found.torch and found.cmake is None:
        pip(log, "install", "cmake")  # none anywhere: the one pip has (CMake 4 is handled)
        found = probe(wheels_first=request.cuda is not None)
    if request.cuda and found.toolkit_pin and not _wheel_toolkit_matches(found):
        _need_space(Path(sys.prefix), FREE_FOR_TOOLKIT, "the CUDA toolkit wheels")
        print(f"{NAME}: installing {found.toolkit_pin} (nvcc for torch's CUDA "
              f"{found.torch_cuda})")
        try:
            pip(log, "install", found.toolkit_pin)
        except StepFailed:
            raise StepFailed(f"no {found.toolkit_pin} from pip (offline, or no nvcc wheel for "
                             f"CUDA {found.torch_cuda}): put it in the wheelhouse, or load a "
                             "CUDA toolkit of torch's version and run without --cuda") from None
        found = probe(wheels_first=True)
    return found


def _wheel_toolkit_matches(found: Toolchain) -> bool:
    return bool(found.nvcc and WHEEL_NVCC.search(found.nvcc)) and \
        version_tuple(found.nvcc_version)[:2] == version_tuple(found.torch_cuda)[:2]


def _report(log: Path, found: Toolchain, result: BuildPlan | BuildRefusal,
            only_print: bool) -> BuildPlan | BuildRefusal:
    report = json.dumps({"toolchain": dataclasses.asdict(found),
                         "decision": dataclasses.asdict(result)}, indent=2)
    with log.open("a") as out:
        out.write(report + "\n")
    if only_print:
        print(report)
    return result


def _install(plan: BuildPlan, log: Path, rebuild: bool, wheelhouse: Path | None) -> str:
    """Installs the cached wheel, else builds and caches one; says where it came from."""
    extra = os.environ.get("HPO_HOROVOD_WHEELS")
    roots = [cache.cache_root(), *(Path(p) for p in (extra,) if p),
             *((wheelhouse / "horovod",) if wheelhouse else ())]
    if rebuild:
        cache.discard(cache.cache_root(), plan.key)
    wheel = None if rebuild else next(
        filter(None, (cache.lookup_compatible(root, plan.key) for root in roots)), None)
    if wheel is None:
        return _build_and_install(plan, log, wheelhouse)
    _install_wheel(wheel, log)
    return f"cached {wheel}" + _export(wheel, wheel.parent.name, wheelhouse)


def _build_and_install(plan: BuildPlan, log: Path, wheelhouse: Path | None) -> str:
    _need_space(Path(tempfile.gettempdir()), FREE_TO_BUILD, "the build")
    print(f"{NAME}: building (a few minutes; progress in {log})")
    with tempfile.TemporaryDirectory(prefix="hpo-horovod-") as tmp:
        wheel = build_wheel(plan, Path(tmp), log)
        wheel = strip_wheel(wheel, Path(tmp, "stripped")) or wheel
        try:
            wheel = cache.publish(cache.cache_root(), plan.key, wheel)
            source = f"built, cached as {wheel}"
        except OSError as error:  # a read-only shared cache: install what was built anyway
            source = f"built, not cached: {error}"
        _install_wheel(wheel, log)
        return source + _export(wheel, plan.key, wheelhouse)


def _export(wheel: Path, key: str, wheelhouse: Path | None) -> str:
    """The wheel, also in DIR/horovod/<key>/ for an offline node (setup.sh --wheelhouse DIR)."""
    if wheelhouse is None:
        return ""
    return f"; in {cache.publish(wheelhouse / 'horovod', key, wheel)}"


def _need_space(folder: Path, needed: int, what: str) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise StepFailed(f"{free / GIB:.1f} GiB free in {folder}, {what} needs "
                         f"{needed / GIB:.0f} GiB: free some, or point TMPDIR elsewhere")


def _install_wheel(wheel: Path, log: Path) -> None:
    pip(log, "uninstall", "--yes", "horovod")
    pip(log, "install", str(wheel))
