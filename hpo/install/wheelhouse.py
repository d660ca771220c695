"""Builds a wheelhouse for offline installs (run by build-wheelhouse.sh on a machine with network).

DIR gets binary wheels of hpo's dependencies (pyproject.toml, test extras included) and of what
building hpo and Horovod needs, Horovod's sdist, and DIR/horovod/<key>/ with every Horovod wheel
this machine's cache holds (HPO_WHEEL_CACHE): on the offline node `scripts/setup.sh
--wheelhouse DIR` installs one whose key matches its torch, Python and compiler, else builds
Horovod from the sdist. torch comes in the version setup.sh pins (HPO_TORCH_VERSION, default
2.13.0; pytorch_optimizer needs it anyway): PyPI's Linux build is the CUDA one, and
--extra-index-url https://download.pytorch.org/whl/cu130 (say) picks another.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from hpo.install.horovod.build import BUILD_DEPS
from hpo.install.horovod.cache import cache_root, entries
from hpo.install.horovod.toolchain import HOROVOD_VERSION

# A checkout's pyproject.toml (hpo/install/wheelhouse.py -> the repository root), when there is
# one; an installed hpo reads its requirements from its own metadata instead.
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# What Ray Tune runs without: ~3/4 of the ray wheel's size (measured on the H100 node).
RAY_TRIM = ("ray/jars/", "ray/rllib/", "ray/serve/", "ray/llm/")


def project_requirements(pyproject: Path, extras: tuple[str, ...] = ("test",)) -> list[str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: pip vendors the same parser
        from pip._vendor import tomli as tomllib
    data = tomllib.loads(pyproject.read_text())
    project = data["project"]
    optional = project.get("optional-dependencies", {})
    extra = [req for name in extras for req in optional.get(name, [])]
    return [*data["build-system"]["requires"], *project["dependencies"], *extra]


DISTRIBUTION = "hpo-hpc"  # pyproject.toml's name (PyPI's `hpo` is another project)


def installed_requirements(extras: tuple[str, ...] = ("test",)) -> list[str]:
    """hpo's requirements from the installed package's metadata (no pyproject.toml there)."""
    from importlib import metadata

    wanted = []
    for requirement in metadata.requires(DISTRIBUTION) or []:
        name, _, marker = requirement.partition(";")
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)", marker)
        if extra is None or extra[1] in extras:
            wanted.append(name.strip())
    return ["setuptools>=68", *wanted]


def requirements() -> list[str]:
    return project_requirements(PYPROJECT) if PYPROJECT.is_file() else installed_requirements()


def download_commands(folder: Path, args: argparse.Namespace) -> list[list[str]]:
    pip = [sys.executable, "-m", "pip", "download", "--dest", str(folder)]
    target = ["--only-binary=:all:"]
    if args.python_version:
        target += ["--python-version", args.python_version, "--implementation", "cp"]
    for platform in args.platform:
        target += ["--platform", platform]
    for url in args.extra_index_url:
        target += ["--extra-index-url", url]
    torch = args.torch or f"torch=={os.environ.get('HPO_TORCH_VERSION', '2.13.0')}"
    wanted = [*requirements(), *BUILD_DEPS, "cmake", torch]
    sdist = ["--no-binary=:all:", "--no-deps", f"horovod=={HOROVOD_VERSION}"]
    return [[*pip, *target, *wanted], [*pip, *sdist]]


def trim_wheel(wheel: Path, prefixes: tuple[str, ...]) -> int:
    """Drops the files under `prefixes` (and their RECORD lines) in place; returns bytes saved."""
    before = wheel.stat().st_size
    trimmed = wheel.with_suffix(".trim")
    with zipfile.ZipFile(wheel) as source, \
            zipfile.ZipFile(trimmed, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            if item.filename.startswith(prefixes):
                continue
            data = source.read(item)
            if re.search(r"\.dist-info/RECORD$", item.filename):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(li for li in lines if not li.startswith(prefixes)).encode()
            target.writestr(item, data)
    trimmed.replace(wheel)
    return before - wheel.stat().st_size


def copy_cached_horovod(folder: Path) -> list[str]:
    keys = []
    for entry in entries(cache_root()):
        shutil.copytree(entry, folder / "horovod" / entry.name, dirs_exist_ok=True)
        keys.append(entry.name)
    return keys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hpo install wheelhouse",
                                     description="Build a wheelhouse for scripts/setup.sh "
                                                 "--wheelhouse DIR (offline installs).")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--python-version", help="the offline node's Python, e.g. 3.12")
    parser.add_argument("--platform", action="append", default=[],
                        help="e.g. manylinux_2_28_x86_64 (repeatable; default: this machine)")
    parser.add_argument("--torch", help="the torch to include (default: torch==2.13.0, or "
                        "HPO_TORCH_VERSION)")
    parser.add_argument("--extra-index-url", action="append", default=[],
                        help="another index, e.g. https://download.pytorch.org/whl/cu130")
    parser.add_argument("--trim-ray", action="store_true", help="drop ray's jars, rllib, "
                        "serve and llm from its wheel (Tune does not need them)")
    parser.add_argument("--dry-run", action="store_true", help="print the pip commands only")
    args = parser.parse_args(argv)
    commands = download_commands(args.folder, args)
    if args.dry_run:
        print("\n".join(" ".join(command) for command in commands))
        return 0
    args.folder.mkdir(parents=True, exist_ok=True)
    for command in commands:
        if subprocess.run(command).returncode != 0:
            print(f"build-wheelhouse: failed: {' '.join(command)}", file=sys.stderr)
            return 1
    if args.trim_ray:
        for wheel in args.folder.glob("ray-*.whl"):
            print(f"build-wheelhouse: {wheel.name} trimmed by "
                  f"{trim_wheel(wheel, RAY_TRIM) / 1e6:.0f} MB")
    keys = copy_cached_horovod(args.folder)
    print(f"build-wheelhouse: {args.folder} ready; Horovod wheels for: {', '.join(keys) or 'none'}"
          f"; offline: scripts/setup.sh --wheelhouse {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
