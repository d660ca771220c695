"""hpo's overhead over plain Ray Tune (`overhead`), and this checkout against an older commit
(`ab`).

overhead, by --mode:
  vs-raw (default)  whole-process wall time of the real `hpo run` CLI against a plain Ray
                    Tune script doing the same work at Ray Tune's best settings (actor reuse,
                    verbose=0, the legacy reporter, no dashboard, worker logs not forwarded,
                    2 CPUs and 1 per trial, FIFO + random: the hpo defaults). Workloads (the
                    trainables are in benchmarks/trials.py):
                      sleep   N trials (default 40) that each sleep 1 s and report once
                      stream  2 trials that each report 50 results/s for 20 s
                    Each round runs hpo and raw back to back (the order alternates, so slow
                    drift of the machine hits both sides alike); the table gives the medians
                    and hpo/raw. A run during which other processes used more than
                    --max-other-cpu CPU seconds is thrown away with its partner and the pair
                    is run again (up to --retries times).
  raw               the raw side alone: plain Ray Tune on one workload (--workload).
  phases            where the wall time of one `hpo run` (or one raw run, --side raw) goes: a
                    child wraps the interesting steps with timers (imports, trainable import,
                    ray.init, Tuner.fit, ray.shutdown, loading and printing the results, hpo's
                    live-progress callback) and prints one line per phase, as seconds since
                    the parent started it; for hpo also the trials' start and first result on
                    the same clock. --workload yaml --yaml FILE: any hpo experiment.
  cpu               where the CPU of one `hpo run` goes, by process, in its start, its ramp
                    and after, on the workloads of overhead-peers (see `cpu_by_process`).

    python -m benchmarks overhead                  # the full benchmark (about 7 minutes)
    python -m benchmarks overhead --quick          # sanity run (about 1.5 minutes)
    python -m benchmarks overhead --mode phases --side raw --workload stream
    python -m benchmarks overhead --mode cpu --workload scale64 --tool hpo-warm

ab, by --mode, always alternating old and new in pairs:
  startup (default)  a 2-trial, 2-epoch images spec (benchmarks/trials.py:timed_images): the
                     whole wall time, the time from the process start to the first result,
                     and the time `hpo --help` takes.
  throughput         2 trials that each report --reports results without a pause
                     (benchmarks/trials.py:burst), hpo's logs on: results per second = all
                     reports / (the last report's wall time - the first's), from the
                     trainables' own clocks; a report blocks its trial until the driver has
                     taken it, so this is the rate the driver sustains.

    python -m benchmarks ab --old fe2f168 --rounds 8 --markdown docs/benchmarks.md
    python -m benchmarks ab --mode throughput --old 71ad344 --rounds 4
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import (
    ROOT,
    Timed,
    hpo_run_command,
    hpo_run_walls,
    log,
    machine,
    md_table,
    median,
    publish,
    run_timed,
    run_when_quiet,
    text_table,
    trial_start,
    versions,
    wait_until_quiet,
    worktree,
)

MODES = ("vs-raw", "raw", "phases", "cpu")


def overhead_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=MODES, default="vs-raw")
    parser.add_argument("--workloads", default="sleep,stream",
                        help="vs-raw: comma-separated, of sleep and stream")
    parser.add_argument("--workload", default=None,
                        help="raw, phases: sleep, stream (phases also yaml); cpu: a workload "
                        "of overhead-peers (default util32)")
    parser.add_argument("--trials", type=int, default=None,
                        help="sleep trials (default 40), or stream trials in raw and phases "
                        "(default 2)")
    parser.add_argument("--sleep-s", type=float, default=1.0)
    parser.add_argument("--stream-trials", type=int, default=2)
    parser.add_argument("--rate", type=float, default=50.0, help="stream: reports per second")
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of each Ray (1 per trial)")
    parser.add_argument("--max-other-cpu", type=float, default=2.0,
                        help="CPU seconds other processes may use during a kept run")
    parser.add_argument("--retries", type=int, default=10,
                        help="disturbed pairs that may be thrown away and run again, per "
                        "workload")
    parser.add_argument("--quiet-timeout", type=float, default=600.0,
                        help="longest wait for a quiet machine before each run (s)")
    parser.add_argument("--run-timeout", type=float, default=900.0)
    parser.add_argument("--storage", default=None, help="raw: results root (default: a temp dir)")
    parser.add_argument("--name", default="raw", help="raw: the experiment's name")
    parser.add_argument("--side", choices=["hpo", "raw"], default="hpo", help="phases")
    parser.add_argument("--yaml", type=Path, help="phases --workload yaml: the experiment")
    parser.add_argument("--env", action="append", default=[],
                        help="phases: KEY=VALUE for the child")
    parser.add_argument("--tool", choices=["hpo", "hpo-warm"], default="hpo", help="cpu")
    parser.add_argument("--every-s", type=float, default=0.02, help="cpu: seconds a reading")


def overhead(args: argparse.Namespace) -> Any:
    if args.mode == "raw":
        return raw_tune(args)
    if args.mode == "phases":
        return phases(args)
    if args.mode == "cpu":
        return cpu_by_process(args)
    return versus_raw(args)


# ---------------------------------------------------------------- vs-raw

@dataclass
class Workload:
    key: str
    label: str
    trials: int
    constants: dict[str, Any]
    reports_per_trial: int
    ideal_s: float  # the work itself on 2 parallel slots, with zero overhead


def workloads(args: argparse.Namespace) -> list[Workload]:
    chosen = []
    if "sleep" in args.workloads:
        chosen.append(Workload(
            "sleep", f"{args.trials} trials x {args.sleep_s:g} s sleep, 1 report each",
            args.trials, {"sleep_s": args.sleep_s}, 1,
            math.ceil(args.trials / args.cpus) * args.sleep_s))
    if "stream" in args.workloads:
        count = int(round(args.rate * args.duration_s))
        chosen.append(Workload(
            "stream", f"{args.stream_trials} trials x {args.rate:g} reports/s x "
            f"{args.duration_s:g} s", args.stream_trials,
            {"rate": args.rate, "duration_s": args.duration_s}, count,
            math.ceil(args.stream_trials / args.cpus) * args.duration_s))
    return chosen


def hpo_command(work: Workload, tmp: Path, name: str, cpus: int) -> list[str]:
    import yaml

    spec = {
        "name": name,
        "trainable": f"benchmarks.trials:{'sleep_once' if work.key == 'sleep' else 'stream'}",
        "metric": "score",
        "mode": "max",
        "num_samples": work.trials,
        "constants": work.constants,
        "resources": {"cpus_per_trial": 1},
    }
    yaml_path = tmp / f"{work.key}.yaml"
    yaml_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return hpo_run_command(yaml_path, tmp / "storage", name, cpus)


def raw_command(work: Workload, tmp: Path, name: str, cpus: int) -> list[str]:
    cmd = [sys.executable, "-m", "benchmarks", "overhead", "--mode", "raw", "--workload",
           work.key, "--trials", str(work.trials), "--cpus", str(cpus),
           "--storage", str(tmp / "storage"), "--name", name]
    if work.key == "sleep":
        cmd += ["--sleep-s", str(work.constants["sleep_s"])]
    else:
        cmd += ["--rate", str(work.constants["rate"]),
                "--duration-s", str(work.constants["duration_s"])]
    return cmd


def count_results(exp_dir: Path) -> tuple[int, int]:
    """(trial folders with a result.json, result lines in all of them)."""
    files = list(exp_dir.glob("*/result.json"))
    lines = sum(sum(1 for line in f.read_text().splitlines() if line.strip()) for f in files)
    return len(files), lines


def run_one(side: str, work: Workload, tmp: Path, tag: str, args: argparse.Namespace,
            env: dict[str, str]) -> Timed:
    name = f"{side}-{work.key}-{tag}"
    build = hpo_command if side == "hpo" else raw_command
    cmd = build(work, tmp, name, args.cpus)
    timed = run_when_quiet(cmd, env=env, quiet_timeout=args.quiet_timeout,
                           run_timeout=args.run_timeout)
    trials, lines = count_results(tmp / "storage" / name)
    timed.extra.update(trials=trials, results=lines, cmd=shlex.join(cmd))
    expected = (work.trials, work.trials * work.reports_per_trial)
    if timed.returncode != 0 or (trials, lines) != expected:
        log(timed.stdout[-3000:])
        log(timed.stderr[-3000:])
        raise SystemExit(f"{side} run failed or did different work: rc {timed.returncode}, "
                         f"{trials} trials / {lines} results, expected {expected}")
    timed.stdout = timed.stdout[-2000:]
    timed.stderr = timed.stderr[-2000:]
    shutil.rmtree(tmp / "storage" / name, ignore_errors=True)
    return timed


def measure(work: Workload, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    kept: dict[str, list[Timed]] = {"hpo": [], "raw": []}
    dropped: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix=f"hpo-bench-{work.key}-"))
    try:
        repeat, attempt = 0, 0
        while repeat < args.rounds:
            order = ("hpo", "raw") if repeat % 2 == 0 else ("raw", "hpo")
            pair = {}
            for side in order:
                pair[side] = run_one(side, work, tmp, f"{repeat}-{attempt}", args, env)
                t = pair[side]
                log(f"  {work.key} round {repeat + 1}/{args.rounds} {side}: "
                    f"{t.wall_s:6.2f} s  (other processes: {t.other_cpu_s:.1f} CPU s)")
            attempt += 1
            noisy = [s for s, t in pair.items() if t.other_cpu_s > args.max_other_cpu]
            if noisy:
                why = "; ".join(pair[s].other_top for s in noisy)
                if len(dropped) < args.retries:
                    log(f"  machine was busy during {'/'.join(noisy)} ({why}): pair run again")
                    dropped.append({s: asdict(t) for s, t in pair.items()})
                    continue
                log(f"  machine was busy during {'/'.join(noisy)} ({why}), no retries left: "
                    "pair kept")
            for side, t in pair.items():
                kept[side].append(t)
            repeat += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    hpo_t = [t.wall_s for t in kept["hpo"]]
    raw_t = [t.wall_s for t in kept["raw"]]
    return {
        "workload": asdict(work),
        "hpo_s": hpo_t,
        "raw_s": raw_t,
        "hpo_median_s": median(hpo_t),
        "raw_median_s": median(raw_t),
        "ratio": median(hpo_t) / median(raw_t),
        "pair_ratios": [h / r for h, r in zip(hpo_t, raw_t, strict=True)],
        "other_cpu_s": {s: [t.other_cpu_s for t in ts] for s, ts in kept.items()},
        "dropped_pairs": len(dropped),
        "commands": {s: ts[0].extra["cmd"] for s, ts in kept.items() if ts},
        "dropped": dropped,
    }


def rows(results: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["workload", "ideal", "hpo median", "raw median", "hpo/raw",
              "hpo runs", "raw runs", "per-pair hpo/raw"]
    body = []
    for res in results:
        body.append([
            res["workload"]["label"], f"{res['workload']['ideal_s']:.0f} s",
            f"{res['hpo_median_s']:.2f} s", f"{res['raw_median_s']:.2f} s",
            f"**{res['ratio']:.3f}**",
            ", ".join(f"{x:.2f}" for x in res["hpo_s"]),
            ", ".join(f"{x:.2f}" for x in res["raw_s"]),
            ", ".join(f"{x:.3f}" for x in res["pair_ratios"]),
        ])
    return header, body


def markdown(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    header, body = rows(results)
    dropped = sum(r["dropped_pairs"] for r in results)
    other = max((x for r in results for xs in r["other_cpu_s"].values() for x in xs),
                default=0.0)
    cmds = "\n".join(f"- {r['workload']['key']}: hpo `{r['commands']['hpo']}` / raw "
                     f"`{r['commands']['raw']}`" for r in results)
    return f"""Whole-process wall time from starting the process to its exit, {args.rounds} rounds
per side, hpo and raw run back to back with the order alternating; median of the rounds.
"ideal" is the work itself on {args.cpus} parallel slots with zero overhead. Pairs thrown
away because other processes used more than {args.max_other_cpu:g} CPU s during a run:
{dropped}; the most CPU other processes used during a kept run: {other:.1f} s.

{md_table(header, body)}

Exact commands of the first round (temp paths vary):
{cmds}
"""


def versus_raw(args: argparse.Namespace) -> dict[str, Any]:
    args.trials = args.trials or 40
    if args.quick:
        args.trials, args.duration_s, args.rounds = 8, 5.0, 1
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    env = dict(os.environ)
    # The same reporter on both sides (hpo sets it itself; the raw side sets it too).
    env["RAY_AIR_NEW_OUTPUT"] = "0"
    env.pop("RAY_AUTH_MODE", None)  # hpo sets its own; the raw side disables it
    log(f"machine: {machine()}; {versions()}")
    results = []
    for work in workloads(args):
        log(f"workload {work.key}: {work.label} (ideal {work.ideal_s:.0f} s)")
        results.append(measure(work, args, env))
    header, body = rows(results)
    print()
    print(text_table(header, [[c.replace("**", "") for c in row] for row in body]))
    publish(args, "overhead", "Overhead: `hpo run` vs plain Ray Tune", markdown(results, args))
    return {"results": results}


# ---------------------------------------------------------------- raw

def raw_tune(args: argparse.Namespace) -> None:
    """Plain Ray Tune doing the same work as `hpo run` in vs-raw, at its best settings."""
    import logging

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # the same reporter hpo selects
    # Ray turns token auth on for a local ray.init() when RAY_AUTH_MODE is unset and saves a
    # token in ~/.ray/auth_token; the benchmark must not leave that behind (hpo uses a
    # private per-run token instead).
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray import tune

    from benchmarks.trials import raw_sleep_once, raw_stream

    workload = args.workload or "sleep"
    if workload == "sleep":
        func, constants = raw_sleep_once, {"sleep_s": args.sleep_s}
        trials = args.trials or 40
    elif workload == "stream":
        func, constants = raw_stream, {"rate": args.rate, "duration_s": args.duration_s}
        trials = args.trials or 2
    else:
        raise SystemExit(f"--mode raw: --workload sleep or stream, not {workload!r}")
    storage = args.storage or tempfile.mkdtemp(prefix="raw-tune-")
    temp_dir = tempfile.mkdtemp(prefix="rawray-", dir="/tmp")  # fresh, as hpo's is
    try:
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING, _temp_dir=temp_dir)
        tuner = tune.Tuner(
            tune.with_resources(func, {"cpu": 1}),
            param_space=constants,
            tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=trials,
                                        reuse_actors=True),
            run_config=tune.RunConfig(name=args.name, storage_path=storage, verbose=0),
        )
        results = tuner.fit()
        print(f"{len(results)} trials, {results.num_errors} errors, best score "
              f"{results.get_best_result().metrics['score']}")
        ray.shutdown()
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
        if args.storage is None:
            shutil.rmtree(storage, ignore_errors=True)


# ---------------------------------------------------------------- phases

MARKS: list[tuple[str, float]] = []
TOTALS: dict[str, list[float]] = {}  # name -> [calls, seconds]


def mark(name: str) -> None:
    MARKS.append((name, time.time()))


def wrap(owner: Any, attr: str, label: str, *, span: bool = True) -> None:
    """Replace owner.attr by a timed version: marks begin/end (span) or adds up (total)."""
    func = getattr(owner, attr)

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        if span:
            mark(f"{label} begin")
        try:
            return func(*args, **kwargs)
        finally:
            if span:
                mark(f"{label} end")
            total = TOTALS.setdefault(label, [0, 0.0])
            total[0] += 1
            total[1] += time.perf_counter() - t0

    setattr(owner, attr, timed)


def phases_child(argv: list[str]) -> None:
    """The timed child: argv is SIDE OUT then the command's arguments (hpo's, or those of
    `python -m benchmarks` for the raw side)."""
    import atexit

    side, out, rest = argv[0], Path(argv[1]), argv[2:]
    mark("interpreter up")

    def dump() -> None:
        mark("atexit")
        out.write_text(json.dumps({"marks": MARKS, "totals": TOTALS}))

    atexit.register(dump)
    if side == "hpo":
        import hpo.cli
        mark("hpo.cli imported")
        import hpo.driver.run.runner
        mark("hpo.driver.run.runner imported (pandas, yaml, pydantic)")
        import ray
        from ray import tune
        mark("ray + ray.tune imported")
        import hpo.driver.plugins.progress
        import hpo.driver.run.translate
        import hpo.ray_adapters.gcs
        import hpo.trial.session

        wrap(hpo.driver.run.translate, "user_trainable", "import the trainable (in a thread)")
        wrap(hpo.driver.run.translate, "trainable", "trainable + with_resources")
        wrap(ray, "init", "ray.init")
        wrap(ray, "shutdown", "ray.shutdown")
        wrap(hpo.ray_adapters.gcs, "reload_auth_settings", "reload auth settings")
        wrap(tune.Tuner, "fit", "Tuner.fit")
        wrap(hpo.driver.run.runner, "_outcome", "load results (pandas)")
        wrap(hpo.cli, "finish", "print table")
        for name in ("on_trial_result", "on_step_end", "setup", "on_experiment_end"):
            wrap(hpo.driver.plugins.progress.LiveProgress, name, f"LiveProgress.{name}",
                 span=False)
        sys.argv = ["hpo", *rest]
        try:
            hpo.cli.main()
        except SystemExit as exc:
            if exc.code:
                raise
    else:
        import ray
        from ray import tune
        mark("ray + ray.tune imported")
        wrap(ray, "init", "ray.init")
        wrap(ray, "shutdown", "ray.shutdown")
        wrap(tune.Tuner, "fit", "Tuner.fit")
        from benchmarks.__main__ import main

        main(rest)
    mark("main returned")


CHILD = "import sys; from benchmarks.overhead import phases_child; phases_child(sys.argv[1:])"


def phases(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="hpo-phases-"))
    workload = args.workload or "sleep"
    if workload == "yaml":
        if args.side != "hpo" or args.yaml is None:
            raise SystemExit("--workload yaml needs --side hpo and --yaml PATH")
        cmd = ["hpo", "run", "--storage", str(tmp / "storage"), "--name", "exp", "--cpus", "2",
               str(args.yaml.resolve())]
    elif workload == "sleep":
        trials = args.trials or 40
        work = Workload("sleep", "", trials, {"sleep_s": 1.0}, 1, trials / 2)
    else:
        trials = args.trials or 2
        work = Workload("stream", "", trials, {"rate": 50.0, "duration_s": args.duration_s},
                        int(50 * args.duration_s), args.duration_s)
    if workload != "yaml":
        build = hpo_command if args.side == "hpo" else raw_command
        cmd = build(work, tmp, f"{args.side}-{work.key}", 2)
    rest = cmd[1:] if args.side == "hpo" else cmd[3:]  # past `python -m benchmarks`
    out = tmp / "marks.json"
    env = {**os.environ, "RAY_AIR_NEW_OUTPUT": "0"}
    env.pop("RAY_AUTH_MODE", None)
    env.update(dict(kv.split("=", 1) for kv in args.env))
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD, args.side, str(out), *rest],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    end = time.time()
    if proc.returncode:
        print(proc.stdout[-2000:], proc.stderr[-3000:])
    data = json.loads(out.read_text())
    print(f"{shlex.join(cmd)}\n  rc {proc.returncode}, total {end - start:.2f} s")
    prev = start
    for name, when in data["marks"]:
        print(f"  {when - start:7.2f} s  (+{when - prev:5.2f})  {name}")
        prev = when
    print(f"  {end - start:7.2f} s  (+{end - prev:5.2f})  process gone")
    for name, (calls, secs) in data["totals"].items():
        print(f"  total {secs:7.3f} s in {calls:5d} calls  {name}")
    if args.side == "hpo":
        trial_clock(tmp / "storage", start)
    shutil.rmtree(tmp, ignore_errors=True)


def trial_clock(storage: Path, start: float) -> None:
    """The trials' start and first result on the parent's clock (from result.json)."""
    firsts, starts = [], []
    for path in storage.glob("*/*/result.json"):
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        began = trial_start(rows) if rows else None
        if began is None:
            continue
        starts.append(began[0] - start)
        firsts.append(began[0] + rows[0]["time_total_s"] - start)
    if starts:
        print(f"  first trial function started at {min(starts):.2f} s, first result at "
              f"{min(firsts):.2f} s ({len(starts)} trials; +-0.5 s at worst)")


# ---------------------------------------------------------------- cpu by process

TICK = os.sysconf("SC_CLK_TCK")
Reading = tuple[float, dict[int, float]]  # when, each process's CPU seconds so far
LOOKS = 3  # a process first seen between its fork and its exec is named by its parent's line


def process_class(pid: int, parent_class: str | None) -> str | None:
    """What a process is, from its command line (None: gone already)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    classes = [(parent_class in ("fork server", "forks"), "forks"),  # also once renamed
               ("gcs_server" in name, "GCS"), (name == "raylet", "raylet"),
               ("worker_stub" in command, "stubs"),
               ("fork_server_process" in command, "fork server"),
               # by their script, then by the title each gives itself once started
               ("dashboard" in command.lower(), "dashboard agent"),
               ("runtime_env" in command or "RuntimeEnvAgent" in command, "runtime-env agent"),
               ("ray::" in command or "default_worker" in command, "workers (Ray's own)"),
               (" -m hpo run" in command or "trials.py" in command, "driver"),
               ("warm_head" in command or "node_start" in command, "ray start")]
    return next((label for hit, label in classes if hit), "other")


def read_all(classes: dict[int, str | None], looks: collections.Counter[int]
             ) -> dict[int, float]:
    cpu = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if classes.get(pid) is None or looks[pid] < LOOKS:
            looks[pid] += 1
            classes[pid] = process_class(pid, classes.get(int(fields[1]))) or classes.get(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / TICK
    return cpu


def sampled(cmd: list[str], env: dict[str, str], every_s: float
            ) -> tuple[float, float, list[Reading], dict[int, str | None]]:
    """Run cmd, reading every process's CPU meanwhile: its start, end, readings, classes."""
    classes: dict[int, str | None] = {os.getpid(): "this sampler"}
    looks: collections.Counter[int] = collections.Counter({os.getpid(): LOOKS})
    start = time.time()
    readings: list[Reading] = [(start, read_all(classes, looks))]  # what each had before
    with subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) as proc:
        while proc.poll() is None:
            readings.append((time.time(), read_all(classes, looks)))
            time.sleep(every_s)
    end = time.time()
    if proc.returncode:
        raise SystemExit(f"the run failed (exit {proc.returncode}); its output: {cmd}")
    return start, end, readings, classes


def in_window(readings: list[Reading], classes: dict[int, str | None], since: float,
              until: float) -> collections.Counter[str]:
    """CPU seconds of each class between two instants (each process's last reading in it)."""
    before = {pid: cpu for when, cpus in readings if when <= since for pid, cpu in cpus.items()}
    last = {pid: cpu for when, cpus in readings if when <= until for pid, cpu in cpus.items()}
    used: collections.Counter[str] = collections.Counter()
    for pid, cpu in last.items():
        label = classes.get(pid)
        if label is not None:
            used[label] += cpu - before.get(pid, 0.0)
    return used


def cpu_by_process(args: argparse.Namespace) -> dict[str, Any]:
    """Every process's CPU (utime + stime from /proc) read every --every-s seconds while an
    overhead-peers run runs, each process named by its class (driver, fork server, forks,
    stubs, raylet, GCS, Ray's dashboard and runtime-env agents, a warm Ray's `ray start`, this
    sampler, other), looked at again on its next readings (one first seen between its fork and
    its exec shows its parent's command). The windows come from the trials' own clocks:
    "start" is the launch to the first trial's first step, "ramp" from there to the first step
    of the workers-th trial, "after" the rest. Every process counts ("other": the machine's
    own, kernel threads included). A process gone before a window's end has its CPU counted
    up to its last reading; the reading itself costs CPU (all of /proc each time), so the
    walls here run longer than overhead-peers'."""
    from benchmarks.peers import WORKLOADS, peer_run, warm_ray

    workload = args.workload or "util32"
    if workload not in WORKLOADS or workload == "throughput":
        raise SystemExit(f"--mode cpu: --workload one of util8, util32, scale64, not "
                         f"{workload!r}")
    trials, _, _, workers = WORKLOADS[workload]
    with tempfile.TemporaryDirectory(prefix="cpu-by-process-") as work:
        cmd, env, spans = peer_run(sys.executable, args.tool, workload, Path(work))
        with warm_ray(args.tool, sys.executable, workers, env):
            start, end, readings, classes = sampled(cmd, env, args.every_s)
        firsts = sorted(json.loads(line)["first"] for line in spans.read_text().splitlines())
    edges = [start, firsts[0], firsts[min(workers, trials) - 1], end]
    print(f"{args.tool} {workload}: start {edges[1] - start:.2f} s, ramp "
          f"{edges[2] - edges[1]:.2f} s, wall {end - start:.2f} s")
    windows = {}
    for name, since, until in zip(("start", "ramp", "after"), edges, edges[1:], strict=False):
        used = in_window(readings, classes, since, until)
        windows[name] = {"s": until - since, "cpu_s": dict(used)}
        print(f"  {name}: {until - since:.2f} s, {sum(used.values()):.2f} CPU-s: " + ", ".join(
            f"{label} {cpu:.2f}" for label, cpu in used.most_common()))
    return windows


# ---------------------------------------------------------------- ab

STARTUP_SPEC = f"""name: startup
trainable: {ROOT / 'benchmarks' / 'trials.py'}:timed_images
metric: val_accuracy
mode: max
num_samples: 2
max_concurrent: 2
search_space:
  lr: {{loguniform: [1.0e-3, 1.0]}}
constants: {{epochs: 2, noise: 2.0, train_size: 2048, val_size: 1024, momentum: 0.9,
             weight_decay: 0.0, batch_size: 128, width: 8}}
scheduler: {{type: asha, max_t: 12, grace_period: 1, reduction_factor: 3}}
search: {{type: optuna, seed: 0}}
resources: {{cpus_per_trial: 1}}
"""

BURST_SPEC = """name: burst
trainable: {trainable}
metric: score
mode: max
num_samples: 2
max_concurrent: 2
search_space:
  x: {{uniform: [0.0, 1.0]}}
constants: {{reports: {reports}}}
resources: {{cpus_per_trial: 1}}
"""


def ab_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=["startup", "throughput"], default="startup")
    parser.add_argument("--reports", type=int, default=5000,
                        help="throughput: reports per trial")
    parser.add_argument("--max-other-cpu", type=float, default=2.0,
                        help="startup: a pair is run again when other processes used more")
    parser.add_argument("--max-dropped", type=int, default=8, help="startup")


def startup_run(checkout: Path, spec: Path, storage: Path, name: str) -> dict[str, float]:
    """`hpo run` from `checkout`, then `hpo --help` there."""
    timed, walls = hpo_run_walls(checkout, spec, storage, name, timeout_s=300)
    helped = run_timed([sys.executable, "-m", "hpo", "--help"], cwd=checkout, timeout_s=60)
    if helped.returncode:
        raise SystemExit(f"hpo --help failed in {checkout}:\n{helped.stderr[-2000:]}")
    return {"wall_s": timed.wall_s, "first_result_s": min(walls) - timed.start_epoch,
            "help_s": helped.wall_s, "other_cpu_s": timed.other_cpu_s + helped.other_cpu_s}


def throughput_run(checkout: Path, spec: Path, storage: Path, name: str) -> dict[str, float]:
    timed, walls = hpo_run_walls(checkout, spec, storage, name, timeout_s=900)
    return {"results_per_s": len(walls) / (max(walls) - min(walls)), "results": len(walls),
            "wall_s": timed.wall_s, "other_cpu_s": timed.other_cpu_s}


def ab_pairs(args: argparse.Namespace, work: Path) -> tuple[list[dict], int]:
    """Old and new back to back, the order alternating; a startup pair disturbed by other
    processes is dropped and run again."""
    spec = work / f"{args.mode}.yaml"
    if args.mode == "startup":
        spec.write_text(STARTUP_SPEC)
        one_run = startup_run
    else:
        spec.write_text(BURST_SPEC.format(trainable=ROOT / "benchmarks" / "trials.py:burst",
                                          reports=args.reports))
        one_run = throughput_run
    pairs, dropped = [], 0
    with worktree(args.old, work / "old") as old:
        while len(pairs) < args.rounds:
            order = ["old", "new"] if len(pairs) % 2 == 0 else ["new", "old"]
            pair = {}
            for side in order:
                wait_until_quiet(log=log)
                checkout = old if side == "old" else ROOT
                pair[side] = one_run(checkout, spec, work / "runs",
                                     f"{side}-{len(pairs)}-{dropped}")
            if args.mode == "startup" and max(
                    p["other_cpu_s"] for p in pair.values()) > args.max_other_cpu:
                dropped += 1
                if dropped > args.max_dropped:
                    raise SystemExit(f"{dropped} pairs disturbed by other processes: the "
                                     "machine is too busy to measure start-up; try later")
                log(f"  pair dropped: other processes used {pair['old']['other_cpu_s']:.1f}/"
                    f"{pair['new']['other_cpu_s']:.1f} CPU s")
                continue
            pairs.append(pair)
            log(f"  pair {len(pairs)}: " + ", ".join(
                f"{s} " + ", ".join(f"{k} {v:.2f}" for k, v in pair[s].items()) for s in order))
    return pairs, dropped


def ab_table(args: argparse.Namespace, pairs: list[dict]) -> tuple[list[str], list[list[str]]]:
    measures = ((("first_result_s", "first result"), ("wall_s", "whole run"),
                 ("help_s", "`hpo --help` exits")) if args.mode == "startup"
                else (("results_per_s", "results/s"),))
    rows = []
    for key, label in measures:
        old = [p["old"][key] for p in pairs]
        new = [p["new"][key] for p in pairs]
        ratios = [p["new"][key] / p["old"][key] for p in pairs]
        if args.mode == "startup":
            cells = [f"{median(old):.2f} s", f"{median(new):.2f} s", f"**{median(ratios):.3f}**"]
        else:
            cells = [f"{median(old):.0f}", f"{median(new):.0f}", f"**{median(ratios):.2f}**"]
        rows.append([label, *cells, ", ".join(f"{r:.2f}" for r in ratios)])
    first = "from process start to" if args.mode == "startup" else "measure"
    return [first, f"old ({args.old}) median", "new median", "new/old (median of pairs)",
            "per pair"], rows


def ab(args: argparse.Namespace) -> dict[str, Any]:
    if not args.old:
        raise SystemExit("ab: --old REV (the commit to compare against) is required")
    if args.rounds_default and args.mode == "throughput":
        args.rounds = 4
    if args.quick:
        args.rounds, args.reports = 1, 500
    with tempfile.TemporaryDirectory(prefix=f"hpo-{args.mode}-ab-") as tmp:
        pairs, dropped = ab_pairs(args, Path(tmp))
    header, rows = ab_table(args, pairs)
    print(text_table(header, [[c.replace("**", "") for c in r] for r in rows]))
    if args.mode == "startup":
        publish(args, "startup", "Start-up: this checkout against an older commit",
                f"A 2-trial, 2-epoch `trainables.images` spec (ASHA + TPE, 2 CPUs), {len(pairs)} "
                "pairs, old and new back to back with the order alternating; the first "
                "result's time comes from the trainable's own clock "
                "(`benchmarks/trials.py:timed_images`). Pairs thrown away because other "
                f"processes used more than {args.max_other_cpu:g} CPU s: {dropped}.\n\n"
                + md_table(header, rows))
    else:
        others = ", ".join(f"{p['old']['other_cpu_s']:.0f}/{p['new']['other_cpu_s']:.0f}"
                           for p in pairs)
        publish(args, "throughput", "Result throughput: this checkout against an older commit",
                f"2 trials x {args.reports} reports without a pause "
                "(`benchmarks/trials.py:burst`), hpo's logs on, "
                f"{len(pairs)} pairs, old and new back to back with the order alternating; "
                "results/s from the trainables' own clocks (first to last report). CPU "
                f"seconds other processes used during each run (old/new): {others}.\n\n"
                + md_table(header, rows))
    return {"pairs": pairs, "dropped": dropped}
