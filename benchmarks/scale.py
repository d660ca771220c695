"""Thousands of trivial trials: `hpo run` against plain Ray Tune at its best settings, side by
side, and `hpo results` / `hpo report` on the biggest experiment.

Each trial reports once, without sleeping or a checkpoint (x ~ uniform(0, 1), score = x), so
what is measured is the per-trial cost of the tuning machinery. 2 CPUs, 1 per trial, FIFO +
random search, actor reuse on both sides. While a run goes, the driver's RSS and the number
of trial folders are sampled every second: from them the time per trial in each fifth of the
run (does a trial cost more when many are already in the experiment?) and the driver's
memory growth per 1,000 trials after the first fifth (a least-squares slope).

With --checkpoint each trial reports 3 times with a checkpoint (`checkpoint: {frequency: 1,
keep: 2}`; Tune's `num_to_keep=2`), and "late/early" says whether a trial costs more when many
came before it (issue 36: the last 2,000 of 5,000 within 1.10x of the early ones); `--sides
hpo-old --old COMMIT` adds hpo at an older commit (a git worktree) to the same run.

Run from the repository root (10,000 trials take about 25 minutes a side on 2 cores):
    python benchmarks/scale.py --trials 1000 3000 --markdown docs/benchmarks.md
    python benchmarks/scale.py --checkpoint --trials 2000 --sides hpo hpo-old raw --old 92b0d0d
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._ab import worktree  # noqa: E402
from benchmarks._common import (  # noqa: E402
    hpo_run_command,
    log,
    machine,
    md_table,
    text_table,
    versions,
    wait_until_quiet,
    write_section,
)

KEY = "scale"


def trivial(config: dict) -> None:
    """hpo: one report, no sleep."""
    import hpo

    hpo.report({"score": float(config["x"])})


def raw_trivial(config: dict) -> None:
    """Plain Ray Tune: the same."""
    from ray import tune

    tune.report({"score": float(config["x"])})


STEPS = 3  # reports of a checkpointing trial, each with a checkpoint (the issue 36 drill)


def checkpointed(config: dict) -> None:
    """hpo: STEPS reports, each with a small checkpoint (`checkpoint: {frequency: 1, keep: 2}`)."""
    import hpo

    for step in range(STEPS):
        hpo.report({"score": float(config["x"]) + step, "ended": time.time()},
                   checkpoint={"step": step})


def raw_checkpointed(config: dict) -> None:
    """Plain Ray Tune: the same, a checkpoint folder per report (`num_to_keep=2`)."""
    from ray import tune

    for step in range(STEPS):
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "step").write_text(str(step))
            tune.report({"score": float(config["x"]) + step, "ended": time.time()},
                        checkpoint=tune.Checkpoint.from_directory(folder))


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
    spec = {"name": name, "trainable": f"{Path(__file__).resolve()}:{trainable}",
            "metric": "score", "mode": "max", "num_samples": trials,
            "search_space": {"x": {"uniform": [0.0, 1.0]}}, "search": {"type": "random"},
            "resources": {"cpus_per_trial": 1}}
    if checkpoint:
        spec["checkpoint"] = {"frequency": 1, "keep": 2}
    space = tmp / f"{name}.yaml"
    space.write_text(yaml.safe_dump(spec, sort_keys=False))
    cmd = hpo_run_command(space, tmp / "storage", name, 2)
    if checkout != ROOT:  # its own hpo package first on sys.path
        cmd = [sys.executable, "-m", "hpo", *cmd[1:]]
    exp_dir = tmp / "storage" / name
    return sampled_run(cmd, exp_dir, 4 * 3600, cwd=checkout), exp_dir


def raw_side(trials: int, tmp: Path, checkpoint: bool) -> Sampled:
    cmd = [sys.executable, __file__, "--raw", str(trials), str(tmp / "raw")]
    return sampled_run(cmd + ["--checkpoint"] * checkpoint, tmp / "raw" / f"raw{trials}",
                       4 * 3600)


def raw_main(trials: int, storage: str, checkpoint: bool) -> None:
    """Plain Ray Tune at its best settings (as benchmarks/raw_tune_overhead.py)."""
    import logging

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray import tune

    temp_dir = tempfile.mkdtemp(prefix="rawray-", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING, _temp_dir=temp_dir)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--checkpoint", action="store_true",
                        help=f"each trial reports {STEPS} times with a checkpoint, keep 2")
    parser.add_argument("--sides", nargs="+", default=["raw", "hpo"],
                        choices=["raw", "hpo", "hpo-old"])
    parser.add_argument("--old", default="HEAD", help="the commit of the hpo-old side")
    parser.add_argument("--raw", nargs=2, metavar=("TRIALS", "STORAGE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw:
        raw_main(int(args.raw[0]), args.raw[1], args.checkpoint)
        return
    rows, biggest = [], None
    with tempfile.TemporaryDirectory(prefix="hpo-scale-", dir="/var/tmp") as tmp_name, \
            contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        old = (stack.enter_context(worktree(args.old, tmp / "old"))
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
    if args.markdown:
        write_section(args.markdown, KEY + "-checkpoint" * args.checkpoint,
                      _markdown(rows, reading, max(args.trials), args.checkpoint))


HEADER = ["trials", "side", "wall s", "ms/trial", "ms/trial by fifth", "driver peak RSS MB",
          "RSS MB per 1,000 trials", "late/early"]


def _markdown(rows: list[list], reading: list[tuple[str, float]], trials: int,
              checkpoint: bool) -> str:
    command = "python " + shlex.join(["benchmarks/scale.py", *sys.argv[1:]])
    trial = (f"{STEPS} reports, each with a checkpoint, keep 2" if checkpoint
             else "one report, no sleep, no checkpoint")
    lines = [f"## Scale: thousands of trivial trials{', checkpointing' * checkpoint}", "",
             f"`{command}` on {machine()}; {versions()}. Trivial trials ({trial}), 2 CPUs, "
             "1 per trial, FIFO + random, actor reuse, plain Ray Tune at its best settings "
             "beside `hpo run`. \"ms/trial by fifth\": the time per trial in each fifth of "
             "the run (by trial folders started; the last fifth includes the teardown); "
             "\"late/early\" (checkpointing runs): the time the last two fifths of the "
             "trials took to end over the second and third fifths', by the trials' own "
             "clocks.", "", md_table(HEADER, rows), ""]
    lines += [f"- {what} on the {trials}-trial experiment: {seconds:.1f} s"
              for what, seconds in reading]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
