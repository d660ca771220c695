"""The GPU path end to end, in one command that installs nothing (for a GPU node with no
network: install from a wheelhouse first, see docs/install.md):

    python -m benchmarks gpu --markdown docs/benchmarks.md    # on a GPU node, under 8 min
    python -m benchmarks gpu --cpu-check                      # the same steps on the CPU

Steps, each a row of the table: the install (torch's NCCL against Horovod's, `hpo doctor`'s
GPU judgements), a 1-GPU trial, four trials packed on one GPU (gpus_per_trial: 0.25) against
one alone, a 1-rank Horovod/NCCL trial and a 1-rank DDP/NCCL trial, and hpo's per-epoch time
against the same trainable standalone (the trial-vs-standalone benchmark). Then a 10 s
trial's `hpo run` wall over its own compute, warm ranks (rank-reuse: one more 1-rank DDP trial
on the GPU with and without reuse), and the adaptive batch against a fixed small one
(adaptive-batch), each capped in time. A step that fails is a
row that says so; the others still run. One GPU cannot show data-parallel efficiency over
1..N GPUs: that row says so. `--cpu-check` runs every step that needs no GPU on the CPU (GPU
sizes, no GPU resources), so the harness itself is tested on machines without one; its
figures are not GPU figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks import (
    ROOT,
    hpo_run_command,
    log,
    md_table,
    publish,
    result_rows,
    run_timed,
    text_table,
)

# trainables.images as measured on the H100 in ../shared/notes/gpu-node.md: 32x32, width 32,
# 16384 images, global batch 256.
IMAGES = {"image_size": 32, "width": 32, "train_size": 16384, "val_size": 2048,
          "batch_size": 256, "lr": 0.05, "epochs": 6}


@dataclass
class Step:
    name: str
    finding: str
    seconds: float
    ok: bool | None  # None: skipped


def _run(tmp: Path, name: str, spec: dict[str, Any], cpus: int) -> tuple[list[list[dict]], float]:
    """One `hpo run`: every trial's results and the run's wall time; raises when it failed."""
    full = {"name": name, "trainable": "trainables.images:train", "metric": "val_accuracy",
            "mode": "max", **spec}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(full))
    timed = run_timed(hpo_run_command(path, tmp / "runs", name, cpus), cwd=ROOT, timeout_s=300)
    if timed.returncode:
        tail = (timed.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"hpo run {name} failed (rc {timed.returncode}): {tail}")
    return result_rows(tmp / "runs" / name), timed.wall_s


def _epoch_s(results: list[dict]) -> float:
    """Median per-epoch time of a trial, its first epoch (start-up, warm-up) left out."""
    times = [r["time_this_iter_s"] for r in results[1:]] or [results[0]["time_this_iter_s"]]
    return statistics.median(times)


def _gpu(args: argparse.Namespace, share: float) -> dict[str, Any]:
    return {"resources": {"cpus_per_trial": args.cpus_per_trial,
                          "gpus_per_trial": 0 if args.cpu_check else share}}


def step_install() -> Step:
    from hpo.cli.doctor_gpu import gpu_rows, probe_gpu

    rows = gpu_rows(probe_gpu())
    bad = [f"{what}: {finding}" for what, finding, fine in rows if not fine]
    shown = {what: finding for what, finding, _ in rows}
    finding = "; ".join(bad) or (f"{shown['torch GPU build']}, NCCL {shown['nccl (torch)']}, "
                                 f"horovod {shown.get('horovod built', 'not installed')}")
    return Step("install (torch, NCCL, Horovod)", finding, 0.0, not bad)


def step_build_plan() -> Step:
    """What scripts/install-horovod.sh would build here (it builds nothing with --probe)."""
    started = time.monotonic()
    done = subprocess.run(["bash", str(ROOT / "scripts" / "install-horovod.sh"), "--probe"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHON": sys.executable})
    try:
        decision = json.loads(done.stdout[done.stdout.index("{"):])["decision"]
    except (ValueError, KeyError):
        decision = {"reason": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    finding = decision.get("summary") or decision.get("reason", "")
    return Step("Horovod build plan (--probe)", finding, time.monotonic() - started,
                "summary" in decision)


def step_one_gpu(args: argparse.Namespace, tmp: Path) -> tuple[Step, float]:
    trials, wall = _run(tmp, "one-gpu", {"constants": IMAGES, **_gpu(args, 1)}, args.cpus)
    epoch = _epoch_s(trials[0])
    compute = sum(r["time_this_iter_s"] for r in trials[0])
    return Step("1-GPU trial", f"{epoch:.3f} s/epoch; whole run {wall:.1f} s for "
                f"{compute:.1f} s of trial time", wall, True), epoch


def step_packing(args: argparse.Namespace, tmp: Path, alone_epoch: float) -> Step:
    spec = {"constants": IMAGES, "max_concurrent": 4,
            "search_space": {"seed": {"grid": [0, 1, 2, 3]}}, **_gpu(args, 0.25)}
    trials, wall = _run(tmp, "packed", spec, args.cpus)
    packed = statistics.median(_epoch_s(t) for t in trials)
    throughput = len(trials) * alone_epoch / packed
    return Step("4 trials on one GPU (0.25 each)", f"{packed:.3f} s/epoch each; throughput "
                f"{throughput:.2f}x one trial alone", wall, len(trials) == 4)


def step_ranks(args: argparse.Namespace, tmp: Path, backend: str) -> Step:
    name = f"1-rank {backend}" + ("" if args.cpu_check else " (NCCL)")
    if backend == "horovod" and not args.cpu_check and not _horovod_nccl():
        return Step(name, "skipped: Horovod has no NCCL (bash scripts/install-horovod.sh)",
                    0.0, None)
    spec = {"constants": IMAGES, "distributed": {
        "backend": backend, "workers": 1, "cpus_per_worker": args.cpus_per_trial,
        "gpus_per_worker": 0 if args.cpu_check else 1}}
    trials, wall = _run(tmp, f"rank-{backend}", spec, args.cpus)
    return Step(name, f"{_epoch_s(trials[0]):.3f} s/epoch", wall, len(trials[0]) > 0)


def _horovod_nccl() -> bool:
    try:
        import horovod.torch as hvd
    except ImportError:
        return False
    return bool(hvd.nccl_built())


def _script_step(name: str, command: list[str], timeout_s: float,
                 finding: str = "") -> Step:
    """Another benchmark (`python -m benchmarks ...`) as one step: the output line that starts
    with `finding` (else its last line) is the finding."""
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "benchmarks", *command], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Step(name, f"timed out after {timeout_s:.0f} s", timeout_s, False)
    lines = (done.stdout + done.stderr).strip().splitlines() or ["(no output)"]
    log("\n".join(f"    {line}" for line in lines[-12:]))
    chosen = [line for line in lines if finding and line.startswith(finding)] or lines
    return Step(name, " ".join(chosen[-1].split())[:300], time.monotonic() - started,
                done.returncode == 0)


def _device(args: argparse.Namespace) -> list[str]:
    return ["--device", "cpu" if args.cpu_check else "cuda"]


def step_standalone(args: argparse.Namespace) -> Step:
    return _script_step("hpo per-epoch / standalone", ["trial-vs-standalone",
                        *_device(args), *args.standalone_args], 400)


def step_ten_second_trial(args: argparse.Namespace, tmp: Path, epoch: float) -> Step:
    """One trial of about 10 s of compute: `hpo run` wall over the trial's own time."""
    seconds = 3.0 if args.cpu_check else 10.0  # --cpu-check tests the step, not the figure
    epochs = max(int(seconds / max(epoch, 1e-3)), 3)
    trials, wall = _run(tmp, "ten-s", {"constants": {**IMAGES, "epochs": epochs},
                                       **_gpu(args, 1)}, args.cpus)
    compute = sum(r["time_this_iter_s"] for r in trials[0])
    return Step("10 s trial: hpo run wall / trial compute", f"{wall / compute:.2f}x "
                f"({wall:.1f} s wall, {compute:.1f} s in the trial, {epochs} epochs)", wall, True)


def step_warm_ranks(args: argparse.Namespace) -> Step:
    # the DDP row: s per more trial with new ranks, with warm ranks, and the ratio
    # --cpu-check: DDP alone (tests/trial/test_rank_reuse.py covers Horovod's warm ranks), 3 trials
    smaller = ["--backends", "ddp", "--trials", "3"] if args.cpu_check else ["--trials", "4"]
    return _script_step("warm rank: one more DDP trial (new, warm s)", [
        "rank-reuse", *_device(args), *smaller, "--rounds", "1"], 240,
        finding="ddp ")


def step_adaptive(args: argparse.Namespace) -> Step:
    return _script_step("adaptive batch vs fixed 64", ["adaptive-batch",
                        *_device(args), "--quiet-timeout", "5"], args.adaptive_timeout)


def _guarded(name: str, step: Any, *call_args: Any) -> Step:
    """A step that raised is a failed row; the steps after it still run."""
    try:
        result = step(*call_args)
    except Exception as exc:  # every failure becomes a row of the table
        result = Step(name, f"failed: {str(exc).strip().splitlines()[-1][:300]}", 0.0, False)
    found = result[0] if isinstance(result, tuple) else result
    log(f"  {found.name}: {found.finding}")
    return result


def run_steps(args: argparse.Namespace, tmp: Path, shown: Any) -> list[Step]:
    """The steps, most telling first; `shown(steps)` after each, so that a run killed at its
    time limit has still written the rows it measured."""
    steps: list[Step] = []

    def add(name: str, step: Any, *call_args: Any) -> Any:
        if args.only and name not in args.only:
            return None
        result = _guarded(name, step, *call_args)
        steps.append(result[0] if isinstance(result, tuple) else result)
        shown(steps)
        return result

    add("install", step_install)
    add("build plan", step_build_plan)
    one = add("1-GPU trial", step_one_gpu, args, tmp)
    alone_epoch = one[1] if isinstance(one, tuple) else 0.25
    if "warm ranks" not in args.skip:
        add("warm ranks", step_warm_ranks, args)
    add("1-rank ddp", step_ranks, args, tmp, "ddp")
    add("1-rank horovod", step_ranks, args, tmp, "horovod")
    add("10 s trial", step_ten_second_trial, args, tmp, alone_epoch)
    if "standalone" not in args.skip:
        add("standalone", step_standalone, args)
    add("packing", step_packing, args, tmp, alone_epoch)
    steps.append(Step("data-parallel efficiency 1..N GPUs", "not measurable on one GPU", 0.0,
                      None))
    if "adaptive batch" not in args.skip:
        add("adaptive batch", step_adaptive, args)
    return steps


def device_name(cpu_check: bool) -> str:
    import torch

    if cpu_check or not torch.cuda.is_available():
        return "CPU only (--cpu-check: not GPU figures)"
    return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"


def report(args: argparse.Namespace, steps: list[Step], final: bool) -> str:
    header = ["step", "finding", "wall", "ok"]
    rows = [[s.name, s.finding, f"{s.seconds:.1f} s" if s.seconds else "-",
             "skipped" if s.ok is None else "yes" if s.ok else "NO"] for s in steps]
    if final:
        print(text_table(header, rows))
    partial = "" if final else " Partial: the rows measured before the run ended."
    return "\n".join([
        f"Device: {device_name(args.cpu_check)}.{partial}", "",
        "`trainables.images` at 32x32, width 32, 16384 images, global batch 256, 6 epochs; "
        "per-epoch times are medians without the first epoch.", "", md_table(header, rows)])


def gpu_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cpu-check", action="store_true",
                        help="run the steps on the CPU (tests the harness; no GPU figures)")
    parser.add_argument("--cpus", type=int, default=None, help="CPUs of the embedded Ray")
    parser.add_argument("--cpus-per-trial", type=int, default=None,
                        help="CPUs of each trial or rank (default 2; 1 with --cpu-check)")
    parser.add_argument("--standalone-args", type=shlex.split, default=[],
                        help='extra arguments for the trial-vs-standalone step, one string: '
                             '--standalone-args="--rounds 2"')
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["standalone", "warm ranks", "adaptive batch"])
    parser.add_argument("--only", nargs="*", default=[], help="run only these steps",
                        choices=["1-GPU trial", "warm ranks", "1-rank ddp", "1-rank horovod",
                                 "10 s trial", "standalone", "packing", "adaptive batch"])
    parser.add_argument("--adaptive-timeout", type=float, default=240,
                        help="seconds the adaptive-batch step may take")


def gpu(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.cpus is None:
        args.cpus = os.cpu_count() or 2
    if args.cpus_per_trial is None:
        args.cpus_per_trial = 1 if args.cpu_check else 2
    if args.cpu_check:
        IMAGES.update(train_size=2048, val_size=512, epochs=3, width=8, image_size=16)

    def shown(steps: list[Step], final: bool = False) -> None:
        publish(args, "gpu", "The GPU path end to end", report(args, steps, final))

    with tempfile.TemporaryDirectory(prefix="hpo-gpu-") as tmp:
        steps = run_steps(args, Path(tmp), shown)
    shown(steps, final=True)
    if any(s.ok is False for s in steps):
        raise SystemExit(1)
    return [vars(s) for s in steps]
