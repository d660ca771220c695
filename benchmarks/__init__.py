"""The benchmark harness: `python -m benchmarks NAME [args]` (`--list` names them all).

REGISTRY maps a name to its workload, its sides, its metrics, the function that runs it and
the sections of docs/benchmarks.md it writes. The flags every benchmark shares are parsed once
(benchmarks/__main__.py): `--rounds`, `--quick`, `--json FILE`, `--markdown FILE`,
`--old REV`. Run from the repository root (hpo installed editable); nothing here imports
tests/, and the test Slurm lives in testing/.

The rest of this module is what the benchmarks share: timing subprocesses on a shared
machine, the machine's description, tables, a commit checked out beside this one, and
writing a benchmark's section of docs/benchmarks.md. Other people's processes on the same
(small) machine distort wall times, so a timed run is preceded by a quiet gate (wait until
other processes use little CPU) and watched by a sampler that adds up the CPU time used by
processes outside the benchmark's own process tree while it ran ("other CPU s"); the
benchmarks can repeat a run that was disturbed. Linux only (reads /proc). Only the standard
library is imported at the top: trial workers import this package with benchmarks.trials.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import importlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: what it runs, what it compares, what it reports and where.

    `run` and `flags` are "module:function": run(args) -> JSON-able measurements (or None),
    flags(parser) adds the benchmark's own options. `sections`: the docs/benchmarks.md
    markers its --markdown writes (fnmatch patterns where a flag picks the name); `notes`:
    hand-written sections beside them that it never writes. `rounds`: the default of
    --rounds (None: no rounds); `quick`: what --quick does (None: no quick mode); `old`: what
    --old REV compares (None: no older commit).
    """

    name: str
    summary: str
    workload: str
    sides: tuple[str, ...]
    metrics: tuple[str, ...]
    run: str
    flags: str
    sections: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    rounds: int | None = None
    quick: str | None = None
    old: str | None = None

    def resolve(self, which: str = "run") -> Callable[..., Any]:
        """The function named by `run` or `flags` (imports its module)."""
        module, _, name = getattr(self, which).partition(":")
        return getattr(importlib.import_module(module), name)

    def owns(self, section: str) -> bool:
        return any(fnmatch.fnmatchcase(section, p) for p in (*self.sections, *self.notes))


REGISTRY: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark(
        "overhead", "hpo's overhead over plain Ray Tune on the same work, and where it goes",
        "sleep: N trials x 1 s sleep, 1 report each; stream: 2 trials x 50 reports/s x 20 s",
        ("hpo run", "plain Ray Tune (raw)"),
        ("whole-process wall s", "hpo/raw", "phases (--mode phases)",
         "CPU s by process (--mode cpu)"),
        "benchmarks.overhead:overhead", "benchmarks.overhead:overhead_flags",
        sections=("overhead",), rounds=3,
        quick="8 sleep trials, 5 s streams, 1 round"),
    Benchmark(
        "overhead-peers", "hpo's orchestration overhead beside the tools a user would pick",
        "throughput (2 trials x 5,000 reports), util8, util32, scale64 (sleeping steps)",
        ("hpo", "hpo-warm", "Ray Tune", "Optuna", "Syne Tune", "DeepHyper"),
        ("results/s", "utilisation", "start / ramp / end s", "CPU s per trial"),
        "benchmarks.peers:peers", "benchmarks.peers:peers_flags",
        sections=("overhead-peers",), rounds=1),
    Benchmark(
        "patches", "what hpo's speed patches below Ray's API buy: on against off",
        "throughput (2 trials x 5,000 reports), util8, util32 (sleeping steps)",
        ("hpo", "hpo-plain (HPO_RAY_PATCHES=off)"),
        ("results/s", "utilisation", "start / ramp / end s", "CPU s per trial"),
        "benchmarks.peers:patches", "benchmarks.peers:patches_flags",
        sections=("patches",), rounds=3),
    Benchmark(
        "ab", "this checkout's `hpo run` against an older commit's, alternating",
        "startup: 2 trials x 2 epochs of trainables.images; throughput: 2 trials x 5,000 "
        "reports without a pause",
        ("old commit (--old)", "this checkout"),
        ("first result s", "whole run s", "`hpo --help` s", "results/s", "new/old"),
        "benchmarks.overhead:ab", "benchmarks.overhead:ab_flags",
        sections=("startup", "throughput"), rounds=8, quick="1 round, 500 reports a trial",
        old="the commit measured against (required)"),
    Benchmark(
        "scale", "thousands of trivial trials: `hpo run` against plain Ray Tune",
        "1,000-3,000 one-report trials (--checkpoint: 3 reports with a checkpoint each)",
        ("hpo run", "plain Ray Tune", "hpo at an older commit (--old)"),
        ("wall s", "ms/trial by fifth", "driver RSS growth", "late/early"),
        "benchmarks.scale:scale", "benchmarks.scale:scale_flags",
        sections=("scale", "scale-checkpoint"), notes=("scale-notes",),
        old="adds the side hpo-old: hpo at this commit"),
    Benchmark(
        "object-by-reference", "large objects by reference, the embedded Ray kept between runs",
        "one process: runs of one-report trials with and without a 500 MB array",
        ("cold run", "warm run", "bare ray.put", "run with the array", "Ray started again"),
        ("wall s", "driver peak RSS", "object store peak"),
        "benchmarks.scale:object_by_reference", "benchmarks.scale:object_by_reference_flags",
        sections=("object-by-reference",), quick="a 20 MB array, 2 trials"),
    Benchmark(
        "search-efficiency", "time to a target accuracy on a real trainable",
        "digits, images, images-long, images-wide (--workload), 40 trials a run",
        ("hpo ASHA+TPE", "hpo random", "Optuna native (TPE + Hyperband)"),
        ("time to target s", "best val_accuracy", "ratios to ASHA+TPE"),
        "benchmarks.search:search_efficiency", "benchmarks.search:search_efficiency_flags",
        sections=("search-efficiency", "search-efficiency-images",
                  "search-efficiency-images-long", "search-efficiency-images-wide"),
        rounds=5, quick="1 seed, 16 trials, 10 epochs"),
    Benchmark(
        "rasda", "RASDA against ASHA with fixed ranks",
        "hpo (default): 8 LRs of trainables.images through `hpo run`, DDP ranks; tune: "
        "Tune's controller on logical GPUs, recorded curves replayed; curves: record them",
        ("ASHA (fixed ranks)", "RASDA (ranks grow)"),
        ("time to target", "rank-seconds", "first at max_t", "wall"),
        "benchmarks.rasda:rasda", "benchmarks.rasda:rasda_flags",
        sections=("rasda", "rasda-max-concurrent-1", "rasda-tune"), rounds=1),
    Benchmark(
        "slurm", "hpo on a real multi-node Slurm (testing.slurm_cluster; root)",
        "startup: job start to Ray ready on 1-3 nodes; forks: trial workers forked or Ray's "
        "own; join: a second job joins a study; binding: srun with and without -c",
        ("hpo", "the official template's fixed sleeps", "forked / Ray's own workers",
         "one node / joined", "srun -n1 / srun -n1 -c"),
        ("s to ready", "s to first steps", "wall ratio", "join latency", "s per step"),
        "benchmarks.slurm:slurm", "benchmarks.slurm:slurm_flags",
        sections=("slurm-startup", "slurm-forks", "join"), rounds=3),
    Benchmark(
        "data-parallel", "data-parallel trials through `hpo run`",
        "trainables.images on 1 and 2 ranks; an adaptive batch; a 2-rank trial's start",
        ("Horovod", "DDP", "1 process"),
        ("scaling efficiency", "time to accuracy", "s per trial"),
        "benchmarks.data_parallel:data_parallel",
        "benchmarks.data_parallel:data_parallel_flags", sections=("data-parallel",), rounds=2),
    Benchmark(
        "rank-reuse", "the overhead of one more data-parallel trial with warm ranks",
        "N sequential trials of a trivial trainable (one allreduce, one report)",
        ("rank reuse on", "rank reuse off (HPO_RANK_REUSE=0)"),
        ("s between trials",),
        "benchmarks.data_parallel:rank_reuse", "benchmarks.data_parallel:rank_reuse_flags",
        rounds=2, quick="3 trials, 1 round"),
    Benchmark(
        "adaptive-batch", "an adaptive batch against a fixed small batch",
        "trainables.images, multi-label (19 classes), one trial a variant",
        ("fixed batch", "adaptive variants"),
        ("epochs and s to the fixed run's best micro-F1 - 0.5", "speed-up"),
        "benchmarks.data_parallel:adaptive_batch",
        "benchmarks.data_parallel:adaptive_batch_flags", sections=("adaptive-batch-*",)),
    Benchmark(
        "trial-vs-standalone", "hpo's per-epoch time against the same trainable standalone",
        "trainables.images, epochs of a few seconds",
        ("one trial of `hpo run`", "the same function in a plain process"),
        ("epoch s", "hpo/standalone speed"),
        "benchmarks.data_parallel:trial_vs_standalone",
        "benchmarks.data_parallel:trial_vs_standalone_flags",
        sections=("trial-vs-standalone-*",), rounds=3),
    Benchmark(
        "gpu", "the GPU path end to end, in one command that installs nothing",
        "trainables.images at 32x32 on one GPU (--cpu-check: the same steps on the CPU)",
        ("1 GPU", "4 trials packed on 1 GPU", "1-rank Horovod / DDP", "standalone"),
        ("s per epoch", "packing throughput", "wall over compute", "ok per step"),
        "benchmarks.gpu:gpu", "benchmarks.gpu:gpu_flags", sections=("gpu",)),
)}


def owner(section: str) -> Benchmark | None:
    """The benchmark that writes (or keeps the notes of) a docs/benchmarks.md section."""
    return next((b for b in REGISTRY.values() if b.owns(section)), None)


def publish(args: argparse.Namespace, key: str, title: str, body: str) -> None:
    """With --markdown: rewrite section `key` of that file with the command that produced it,
    the date, the machine, and the body (the figures). The block holds no heading: `title`
    becomes the heading above the start marker when the section is new, and stays as the
    page has it after that, as does the reading below the end marker
    (tests/project/test_benchmarks_doc.py)."""
    if not getattr(args, "markdown", None):
        return
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    took = (time.monotonic() - args.started) / 60
    head = (f"Command: `{args.command}` (run {when}, took {took:.1f} min). "
            f"Machine: {machine()}; {versions()}.")
    write_section(args.markdown, key, f"{head}\n\n{body.strip()}\n", heading=title)
    log(f"wrote the {key} section of {args.markdown}")


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
    return run_timed(cmd, cwd=ROOT, env=env, timeout_s=run_timeout)


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
    """The GPUs torch sees ("no GPU" without torch or CUDA)."""
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
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
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


def write_section(path: Path, key: str, text: str, heading: str | None = None) -> None:
    """Put text between `<!-- key:start -->` and `<!-- key:end -->` in path; the rest of the
    file is left alone. Where the markers are not there yet the block is appended, under
    `## heading` when one is given (the heading sits above the start marker, outside what
    the next refresh replaces)."""
    begin, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    old = path.read_text() if path.exists() else ""
    # markers count on a line of their own (a page may quote one in its prose)
    found = re.search(rf"(?ms)^{re.escape(begin)}$.*?^{re.escape(end)}$", old)
    if found:
        new = old[:found.start()] + block + old[found.end():]
    else:
        above = f"## {heading}\n\n" if heading else ""
        new = (old.rstrip() + "\n\n" if old.strip() else "") + above + block + "\n"
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


@contextlib.contextmanager
def worktree(commit: str, where: Path) -> Iterator[Path]:
    """`commit` checked out at `where` (a git worktree), removed after."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "-f", str(where), commit],
                   check=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)],
                       check=False)


def hpo_run_walls(checkout: Path, spec: Path, storage: Path, name: str,
                  timeout_s: float) -> tuple[Timed, list[float]]:
    """`python -m hpo run` from `checkout` (its own hpo package is imported first) on
    2 CPUs; the run's timing and every result row's `wall` (the trainable's clock)."""
    cmd = [sys.executable, "-m", "hpo", "run", str(spec), "--storage", str(storage),
           "--name", name, "--cpus", "2"]
    timed = run_timed(cmd, cwd=checkout, timeout_s=timeout_s)
    walls = [json.loads(line)["wall"] for f in (storage / name).glob("*/result.json")
             for line in f.read_text().splitlines() if line.strip()]
    if timed.returncode or not walls:
        raise SystemExit(f"{name} failed (rc {timed.returncode}):\n{timed.stderr[-2000:]}")
    return timed, walls


def result_rows(exp_dir: Path) -> list[list[dict[str, Any]]]:
    """Every trial's result.json rows under an experiment folder, trial by trial (sorted)."""
    return [[json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            for path in sorted(exp_dir.glob("*/result.json"))]


def trial_start(rows: list[dict[str, Any]]) -> tuple[float, float] | None:
    """When a trial started, from its results, with +- how much; None when inconsistent.

    Ray's `timestamp` is floor(t) and `time_total_s` is t - start (the function trainable's
    session), so the start lies in [timestamp - time_total_s, +1) for every result."""
    low = max(r["timestamp"] - r["time_total_s"] for r in rows)
    high = min(r["timestamp"] + 1 - r["time_total_s"] for r in rows)
    return ((low + high) / 2, (high - low) / 2) if low <= high else None
