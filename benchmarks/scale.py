"""Many trials and large objects: `scale` and `object-by-reference`.

scale: thousands of trivial trials, `hpo run` against plain Ray Tune at its best settings,
side by side, and `hpo results` / `hpo report` on the biggest experiment. Each trial reports
once, without sleeping or a checkpoint (x ~ uniform(0, 1), score = x; benchmarks/trials.py),
so what is measured is the per-trial cost of the tuning machinery. 2 CPUs, 1 per trial, FIFO
+ random search, actor reuse on both sides. While a run goes, the driver's RSS and the number
of trial folders are sampled every second: from them the time per trial in each fifth of the
run (does a trial cost more when many are already in the experiment?) and the driver's
memory growth per 1,000 trials after the first fifth (a least-squares slope). With
--checkpoint each trial reports 3 times with a checkpoint (`checkpoint: {frequency: 1, keep:
2}`; Tune's `num_to_keep=2`), and "late/early" says whether a trial costs more when many came
before it (the last 2,000 of 5,000 should stay within 1.10x of the early ones); `--old REV`
adds hpo at an older commit (a git worktree) to the same run, as the side hpo-old.

object-by-reference: one process, as a notebook would do it: a run without data starts Ray
(cold: also the first imports), the same run again reuses it (warm), one bare `ray.put` of
the array, the run with the array passed as `parameters` to every trial (each trial sums all
of it), and after `hpo.shutdown()` the same run once more (Ray started again, imports already
done: the start-up a kept Ray saves is this minus warm). For each: wall time, the driver's
peak RSS above its level before, and the peak of the object store's shared memory (/dev/shm
pages in use) above its level before, sampled every 20 ms.

Run from the repository root (10,000 trials take about 25 minutes a side on 2 cores):
    python -m benchmarks scale --trials 1000 3000 --markdown docs/benchmarks.md
    python -m benchmarks scale --checkpoint --trials 2000 --old 92b0d0d
    python -m benchmarks object-by-reference --mb 500 --trials 8 --markdown docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks import (
    ROOT,
    hpo_run_command,
    log,
    md_table,
    publish,
    text_table,
    wait_until_quiet,
    worktree,
)
from benchmarks.trials import STEPS

TRIALS = ROOT / "benchmarks" / "trials.py"


@dataclass
class Sampled:
    """One run: wall time, and (seconds, trial folders, driver RSS MB) samples."""

    wall_s: float
    returncode: int
    samples: list[tuple[float, int, float]] = field(default_factory=list)
    peak_mb: float = 0.0
    stderr: str = ""
    ends: list[float] = field(default_factory=list)  # each trial's last `ended`, sorted

    def late_over_early(self) -> float:
        """The time the last two fifths of the trials took to end over the second and third
        fifths' (by the trials' own clocks: start-up and teardown left out); nan without."""
        n = len(self.ends)
        if n < 10:
            return float("nan")
        mark = [self.ends[max(0, n * k // 5 - 1)] for k in range(6)]
        return (mark[5] - mark[3]) / (mark[3] - mark[1])

    def fifths(self, total: int) -> list[float]:
        """ms per trial in each fifth of the run (by trial folders seen)."""
        marks = [0.0]
        for k in range(1, 5):
            marks.append(next((t for t, n, _ in self.samples if n >= total * k / 5),
                              self.wall_s))
        marks.append(self.wall_s)
        return [(b - a) * 1000 / (total / 5) for a, b in zip(marks, marks[1:], strict=False)]

    def growth_mb_per_1000(self, total: int) -> float:
        """Least-squares slope of RSS over trial folders, after the first fifth."""
        pts = [(n, mb) for _, n, mb in self.samples if n >= total / 5]
        if len(pts) < 3:
            return float("nan")
        mean_n = sum(n for n, _ in pts) / len(pts)
        mean_m = sum(m for _, m in pts) / len(pts)
        num = sum((n - mean_n) * (m - mean_m) for n, m in pts)
        den = sum((n - mean_n) ** 2 for n, _ in pts)
        return num / den * 1000 if den else float("nan")


def _status(pid: int, key: str) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _folders(exp_dir: Path) -> int:
    try:
        return sum(1 for e in os.scandir(exp_dir) if e.is_dir())
    except OSError:
        return 0


def sampled_run(cmd: list[str], exp_dir: Path, timeout_s: float, cwd: Path = ROOT) -> Sampled:
    """Run cmd, sampling its RSS and exp_dir's trial folders every second."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    result = Sampled(0.0, 0)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(1.0):
            rss = _status(proc.pid, "VmRSS")
            result.peak_mb = max(result.peak_mb, _status(proc.pid, "VmHWM"))
            result.samples.append((time.perf_counter() - start, _folders(exp_dir), rss))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    _, result.stderr = proc.communicate(timeout=timeout_s)
    result.wall_s, result.returncode = time.perf_counter() - start, proc.returncode
    stop.set()
    thread.join()
    result.ends = sorted(filter(None, map(_ended, exp_dir.glob("*/result.json"))))
    return result


def _ended(result_json: Path) -> float | None:
    lines = result_json.read_text().strip().splitlines()
    return json.loads(lines[-1]).get("ended") if lines else None


def hpo_side(trials: int, tmp: Path, checkpoint: bool,
             checkout: Path = ROOT) -> tuple[Sampled, Path]:
    """`hpo run` of this checkout, or (python -m hpo from it) of an older one's."""
    trainable = "checkpointed" if checkpoint else "trivial"
    name = f"hpo{trials}" + ("-old" if checkout != ROOT else "")
    spec = {"name": name, "trainable": f"{TRIALS}:{trainable}",
            "metric": "score", "mode": "max", "num_samples": trials,
            "search_space": {"x": {"uniform": [0.0, 1.0]}}, "search": {"type": "random"},
            "resources": {"cpus_per_trial": 1}}
    if checkpoint:
        spec["checkpoint"] = {"frequency": 1, "keep": 2}
    space = tmp / f"{name}.yaml"
    space.write_text(yaml.safe_dump(spec, sort_keys=False))
    cmd = hpo_run_command(space, tmp / "storage", name, 2)
    if checkout != ROOT:  # its own hpo package imported first
        cmd = [sys.executable, "-m", "hpo", *cmd[1:]]
    exp_dir = tmp / "storage" / name
    return sampled_run(cmd, exp_dir, 4 * 3600, cwd=checkout), exp_dir


def raw_side(trials: int, tmp: Path, checkpoint: bool) -> Sampled:
    cmd = [sys.executable, "-m", "benchmarks", "scale", "--raw", str(trials), str(tmp / "raw")]
    return sampled_run(cmd + ["--checkpoint"] * checkpoint, tmp / "raw" / f"raw{trials}",
                       4 * 3600)


def raw_main(trials: int, storage: str, checkpoint: bool) -> None:
    """Plain Ray Tune at its best settings (as the overhead benchmark's raw side)."""
    import logging

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray import tune

    temp_dir = tempfile.mkdtemp(prefix="rawray-", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING, _temp_dir=temp_dir)
    from benchmarks.trials import raw_checkpointed, raw_trivial

    trainable = raw_checkpointed if checkpoint else raw_trivial
    keep = tune.CheckpointConfig(num_to_keep=2) if checkpoint else None
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}), param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=trials,
                                    reuse_actors=True),
        run_config=tune.RunConfig(name=f"raw{trials}", storage_path=storage, verbose=0,
                                  checkpoint_config=keep))
    results = tuner.fit()
    assert len(results) == trials and not results.num_errors, results
    ray.shutdown()


def timed_cli(*args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hpo", *args], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"hpo {' '.join(args)} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - start


def scale_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--checkpoint", action="store_true",
                        help=f"each trial reports {STEPS} times with a checkpoint, keep 2")
    parser.add_argument("--sides", nargs="+", default=["raw", "hpo"],
                        choices=["raw", "hpo", "hpo-old"])
    parser.add_argument("--raw", nargs=2, metavar=("TRIALS", "STORAGE"), help=argparse.SUPPRESS)


def scale(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.raw:
        raw_main(int(args.raw[0]), args.raw[1], args.checkpoint)
        return None
    if args.old and "hpo-old" not in args.sides:
        args.sides.append("hpo-old")
    rows, biggest = [], None
    with tempfile.TemporaryDirectory(prefix="hpo-scale-", dir="/var/tmp") as tmp_name, \
            contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        old = (stack.enter_context(worktree(args.old or "HEAD", tmp / "old"))
               if "hpo-old" in args.sides else ROOT)
        for trials in args.trials:
            for side in args.sides:
                wait_until_quiet(timeout_s=120, log=log)
                if side == "raw":
                    run = raw_side(trials, tmp, args.checkpoint)
                else:
                    run, exp_dir = hpo_side(trials, tmp, args.checkpoint,
                                            old if side == "hpo-old" else ROOT)
                    biggest = exp_dir if side == "hpo" else biggest
                if run.returncode:
                    raise SystemExit(f"{side} {trials} failed: {run.stderr[-3000:]}")
                fifths = run.fifths(trials)
                rows.append([trials, side, f"{run.wall_s:.1f}",
                             f"{run.wall_s * 1000 / trials:.1f}",
                             " / ".join(f"{ms:.0f}" for ms in fifths), f"{run.peak_mb:.0f}",
                             f"{run.growth_mb_per_1000(trials):.1f}",
                             f"{run.late_over_early():.2f}"])
                log(text_table(HEADER, rows[-1:]))
        reading = []  # reading the results is measured on the trivial trials only
        if biggest is not None and not args.checkpoint:
            reading = [("hpo results (csv)", timed_cli("results", str(biggest), "--format",
                                                       "csv")),
                       ("hpo report", timed_cli("report", str(biggest), "-o",
                                                str(tmp / "report.html")))]
    log(text_table(HEADER, rows))
    for what, seconds in reading:
        log(f"{what} on {biggest.name}: {seconds:.1f} s")
    publish(args, "scale" + "-checkpoint" * args.checkpoint,
            f"Scale: thousands of trivial trials{', checkpointing' * args.checkpoint}",
            _markdown(rows, reading, max(args.trials), args.checkpoint))
    return {"header": HEADER, "rows": rows, "reading": reading}


HEADER = ["trials", "side", "wall s", "ms/trial", "ms/trial by fifth", "driver peak RSS MB",
          "RSS MB per 1,000 trials", "late/early"]


def _markdown(rows: list[list], reading: list[tuple[str, float]], trials: int,
              checkpoint: bool) -> str:
    trial = (f"{STEPS} reports, each with a checkpoint, keep 2" if checkpoint
             else "one report, no sleep, no checkpoint")
    lines = [f"Trivial trials ({trial}), 2 CPUs, "
             "1 per trial, FIFO + random, actor reuse, plain Ray Tune at its best settings "
             "beside `hpo run`. \"ms/trial by fifth\": the time per trial in each fifth of "
             "the run (by trial folders started; the last fifth includes the teardown); "
             "\"late/early\" (checkpointing runs): the time the last two fifths of the "
             "trials took to end over the second and third fifths', by the trials' own "
             "clocks.", "", md_table(HEADER, rows), ""]
    lines += [f"- {what} on the {trials}-trial experiment: {seconds:.1f} s"
              for what, seconds in reading]
    return "\n".join(lines)



# ---------------------------------------------------------------- object-by-reference

MB = 2**20


def touch(config: dict[str, Any], data: Any = None) -> None:
    """object-by-reference's trial: one report, after reading every page of `data`."""
    import hpo

    total = float(data.sum()) if data is not None else 0.0  # reads every page of it
    hpo.report({"score": config["x"] + total * 0})


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _shm() -> int:
    return shutil.disk_usage("/dev/shm").used


def measured(what: Callable[[], Any]) -> dict[str, float]:
    """Wall time and peaks above the levels before, of the driver's RSS and /dev/shm."""
    base_rss, base_shm, peaks, done = _rss(), _shm(), [0, 0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peaks[0], peaks[1] = max(peaks[0], _rss()), max(peaks[1], _shm())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    what()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    return {"wall_s": wall, "driver_mb": max(peaks[0] - base_rss, 0) / MB,
            "store_mb": max(peaks[1] - base_shm, 0) / MB}


def _counting_puts() -> list[int]:
    """Count ray.put calls made in this process (hpo's objects_in_store calls ray.put)."""
    import ray

    calls, original = [0], ray.put

    def put(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    ray.put = put
    return calls


def object_by_reference_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mb", type=int, default=500)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--cpus", type=int, default=2)


def object_by_reference(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    import numpy as np

    import hpo

    if args.quick:
        args.mb, args.trials = 20, 2
    data = np.ones(args.mb * MB // 8)
    storage = Path(tempfile.mkdtemp(prefix="hpo-bench-"))
    spec = {"metric": "score", "mode": "max", "storage": str(storage),
            "search_space": {"x": {"grid": list(range(args.trials))}}}

    def run(name: str, **extra: Any) -> None:
        hpo.run({**spec, "name": name}, trainable=touch, num_cpus=args.cpus, **extra)

    rows = {"cold: first run (starts Ray), no data": measured(lambda: run("cold")),
            "warm: same run again (Ray kept)": measured(lambda: run("warm"))}
    import ray

    rows["one bare ray.put of the array"] = measured(lambda: ray.get(ray.put(data)) is None)
    puts = _counting_puts()
    rows[f"warm run, array to all {args.trials} trials"] = measured(
        lambda: run("data", parameters={"data": data}))
    hpo.shutdown()
    rows["after hpo.shutdown(): same run, Ray started again"] = measured(lambda: run("again"))
    hpo.shutdown()
    shutil.rmtree(storage, ignore_errors=True)
    _report(args, rows, puts[0])
    return rows


def _report(args: argparse.Namespace, rows: dict[str, dict[str, float]], puts: int) -> None:
    table = md_table(["what", "wall s", "driver peak RSS +MB", "object store peak +MB"],
                     [[k, f"{v['wall_s']:.2f}", f"{v['driver_mb']:.0f}", f"{v['store_mb']:.0f}"]
                      for k, v in rows.items()])
    values = list(rows.values())
    text = (f"A {args.mb} MB numpy array, {args.trials} one-report "
            f"trials, {args.cpus} CPUs, one Python process as in a notebook:\n\n{table}\n\n"
            f"- `ray.put` calls during the run with data: {puts} (one per object and run).\n"
            f"- The data costs the run {values[3]['wall_s'] - values[1]['wall_s']:+.2f} s over "
            f"the same warm run without it; one bare put takes {values[2]['wall_s']:.2f} s.\n"
            f"- Start-up saved by the kept Ray: {values[4]['wall_s'] - values[1]['wall_s']:.2f}"
            " s (Ray started again minus warm run).\n")
    print(text)
    publish(args, "object-by-reference",
            "Python API: objects by reference, Ray kept between runs", text)
