"""Shared helpers of the benchmark scripts: timing subprocesses on a shared machine, the
machine's description, and writing a script's section of docs/benchmarks.md.

Other people's processes on the same (small) machine distort wall times, so every timed
run is preceded by a quiet gate (wait until other processes use little CPU) and watched by
a sampler that adds up the CPU time used by processes outside the benchmark's own process
tree while it ran ("other CPU s"); the scripts can repeat a run that was disturbed.
Linux only (reads /proc).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, float, str]]:
    """pid -> (ppid, cpu seconds used so far, command name) for every live process."""
    table: dict[int, tuple[int, float, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        name = raw[raw.index("(") + 1: raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        # fields[0] is state (field 3); ppid is field 4, utime 14, stime 15
        table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK,
                                  name)
    return table


def _descendants(table: dict[int, tuple[int, float, str]], roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(children.get(pid, []))
    return seen


class OtherCpu:
    """Samples /proc and adds up CPU time used by processes outside our own tree.

    A process seen for the first time counts with all the CPU it has used since it started
    (or since the sampler started, for processes alive then); processes that start and end
    between two samples are missed, so this is a lower bound, good enough to flag a noisy run.
    `tree_cpu_s`: the CPU time of our own tree (this process left out), by the same sampling.
    """

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.other_cpu_s = 0.0
        self.busiest: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[int, float] = {}

    def _sample(self, first: bool = False) -> None:
        table = _proc_table()
        # once ours, always ours (Ray's processes may outlive the driver, reparented to init)
        self._ours |= _descendants(table, {os.getpid()})
        now: dict[int, float] = {}
        for pid, (_, cpu, name) in table.items():
            if pid in self._ours:
                if pid != os.getpid():
                    self._tree[pid] = cpu
                continue
            now[pid] = cpu
            if not first:
                delta = cpu - self._last.get(pid, 0.0 if pid not in self._seen else cpu)
                if delta > 0:
                    self.other_cpu_s += delta
                    self.busiest[name] = self.busiest.get(name, 0.0) + delta
        self._seen.update(now)
        self._last = now

    def __enter__(self) -> OtherCpu:
        self._seen: set[int] = set()
        self._ours: set[int] = set()
        self._tree: dict[int, float] = {}
        self._sample(first=True)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._sample()

    @property
    def tree_cpu_s(self) -> float:
        return sum(self._tree.values())

    def top(self, n: int = 3) -> str:
        items = sorted(self.busiest.items(), key=lambda kv: -kv[1])[:n]
        return ", ".join(f"{k} {v:.1f}s" for k, v in items if v >= 0.1)


def wait_until_quiet(max_other_cores: float = 0.15, window_s: float = 5.0,
                     timeout_s: float = 600.0, log: Any = print) -> float:
    """Block until other processes used < max_other_cores CPUs over a window; returns the
    seconds waited (gives up after timeout_s and carries on, saying so)."""
    start = time.monotonic()
    warned = False
    while True:
        with OtherCpu(interval=window_s / 3) as other:
            time.sleep(window_s)
        load = other.other_cpu_s / window_s
        waited = time.monotonic() - start
        if load < max_other_cores:
            return waited
        if waited > timeout_s:
            log(f"  machine still busy after {waited:.0f}s ({load:.2f} cores used by others: "
                f"{other.top()}); measuring anyway")
            return waited
        if not warned:
            log(f"  waiting for a quiet machine ({load:.2f} cores used by others: {other.top()})")
            warned = True


@dataclass
class Timed:
    wall_s: float
    returncode: int
    other_cpu_s: float
    other_top: str
    start_epoch: float  # time.time() just before the process was started
    stdout: str = ""
    stderr: str = ""
    tree_cpu_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def run_timed(cmd: Sequence[str], *, cwd: str | Path, env: dict[str, str] | None = None,
              timeout_s: float | None = None) -> Timed:
    """Run cmd to completion; wall time from just before start to just after exit."""
    with OtherCpu() as other:
        start_epoch = time.time()
        t0 = time.perf_counter()
        proc = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        wall = time.perf_counter() - t0
    return Timed(wall, proc.returncode, other.other_cpu_s, other.top(), start_epoch,
                 proc.stdout, proc.stderr, other.tree_cpu_s)


def log(*parts: Any) -> None:
    print(*parts, flush=True)


def hpo_run_command(yaml_path: Path, storage: Path, name: str, cpus: int,
                    sets: Sequence[str] = ()) -> list[str]:
    """The `hpo run` command line, with the `hpo` script of this interpreter's venv."""
    hpo = shutil.which("hpo", path=str(Path(sys.executable).parent)) or "hpo"
    cmd = [hpo, "run", "--storage", str(storage), "--name", name, "--cpus", str(cpus),
           str(yaml_path)]
    for item in sets:
        cmd += ["--set", item]
    return cmd


def run_when_quiet(cmd: Sequence[str], *, env: dict[str, str], quiet_timeout: float,
                   run_timeout: float) -> Timed:
    """Wait for a quiet machine, then time cmd run from the repository root."""
    wait_until_quiet(timeout_s=quiet_timeout, log=log)
    return run_timed(cmd, cwd=Path(__file__).resolve().parent.parent, env=env,
                     timeout_s=run_timeout)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f", {kib / 2**20:.0f} GiB RAM"
    except (OSError, AttributeError):
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{os.cpu_count()} cores ({cpu}){mem}, {_gpus()}, {system}"


def _gpus() -> str:
    """The GPUs torch sees ("no GPU" without torch or CUDA): a GPU node said "no GPU" before."""
    try:
        import torch
    except ImportError:
        return "no GPU"
    if not torch.cuda.is_available():
        return "no GPU"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"{len(names)} x {names[0]} (CUDA {torch.version.cuda})"


def env_with_root(**extra: str) -> dict[str, str]:
    """This process's environment for a child that imports hpo from this checkout: the
    checkout first on PYTHONPATH, whatever was there (an offline install's --target) kept."""
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def versions() -> str:
    import importlib.metadata as md

    parts = [f"Python {platform.python_version()}"]
    for pkg in ("ray", "optuna", "torch"):
        with contextlib.suppress(md.PackageNotFoundError):
            parts.append(f"{pkg} {md.version(pkg)}")
    return ", ".join(parts)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def write_section(path: Path, key: str, text: str) -> None:
    """Put text between `<!-- key:start -->` and `<!-- key:end -->` in path (appended, with
    the markers, when they are not there yet); the rest of the file is left alone."""
    begin, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    old = path.read_text() if path.exists() else ""
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        tail = rest.split(end, 1)[1]
        new = head + block + tail
    else:
        new = (old.rstrip() + "\n\n" if old.strip() else "") + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)
