"""Where the wall time of one `hpo run` (or one plain Ray Tune run) goes: a diagnostic for
benchmarks/overhead.py, not a benchmark of its own.

It runs the same work as overhead.py in a child process that wraps the interesting steps
with timers (imports, trainable import, ray.init, Tuner.fit, ray.shutdown, loading and
printing the results, hpo's live-progress callback, hpo.report) and prints one line per
phase, as seconds since the parent started the child.

    python benchmarks/phases.py hpo sleep --trials 40
    python benchmarks/phases.py raw stream --duration-s 20
    python benchmarks/phases.py hpo stream --env HPO_X=1     # extra env for the child
    python benchmarks/phases.py hpo yaml --yaml my-experiment.yaml   # any hpo experiment

For an hpo run it also places the trials on the same clock, from their result.json files:
when the first trial's function started and when the first result came.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

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


def child(side: str, rest: list[str], out: Path) -> None:
    import atexit

    mark("interpreter up")

    def dump() -> None:
        mark("atexit")
        out.write_text(json.dumps({"marks": MARKS, "totals": TOTALS}))

    atexit.register(dump)
    if side == "hpo":
        import hpo.cli
        mark("hpo.cli imported")
        import hpo.driver.runner
        mark("hpo.driver.runner imported (pandas, yaml, pydantic)")
        import ray
        from ray import tune
        mark("ray + ray.tune imported")
        import hpo.cluster.ray_private
        import hpo.driver.plugins.progress
        import hpo.driver.translate
        import hpo.trial.session

        wrap(hpo.driver.translate, "user_trainable", "import the trainable (in a thread)")
        wrap(hpo.driver.translate, "trainable", "trainable + with_resources")
        wrap(ray, "init", "ray.init")
        wrap(ray, "shutdown", "ray.shutdown")
        wrap(hpo.cluster.ray_private, "reload_auth_settings", "reload auth settings")
        wrap(tune.Tuner, "fit", "Tuner.fit")
        wrap(hpo.driver.runner, "_outcome", "load results (pandas)")
        wrap(hpo.cli, "finish", "print table")
        for name in ("on_trial_result", "on_step_end", "setup", "on_experiment_end"):
            wrap(hpo.driver.plugins.progress.LiveProgress, name, f"LiveProgress.{name}", span=False)
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
        sys.argv = ["raw_tune_overhead.py", *rest]
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import raw_tune_overhead

        raw_tune_overhead.main()
    mark("main returned")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[4:], Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("side", choices=["hpo", "raw"])
    parser.add_argument("workload", choices=["sleep", "stream", "yaml"])
    parser.add_argument("--yaml", type=Path, help="workload yaml: the experiment to run")
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the child")
    args = parser.parse_args()

    from benchmarks.overhead import Workload, hpo_command, raw_command

    tmp = Path(tempfile.mkdtemp(prefix="hpo-phases-"))
    if args.workload == "yaml":
        if args.side != "hpo" or args.yaml is None:
            raise SystemExit("workload yaml needs side hpo and --yaml PATH")
        cmd = ["hpo", "run", "--storage", str(tmp / "storage"), "--name", "exp", "--cpus", "2",
               str(args.yaml.resolve())]
    elif args.workload == "sleep":
        trials = args.trials or 40
        work = Workload("sleep", "", trials, {"sleep_s": 1.0}, 1, trials / 2)
    else:
        trials = args.trials or 2
        work = Workload("stream", "", trials, {"rate": 50.0, "duration_s": args.duration_s},
                        int(50 * args.duration_s), args.duration_s)
    if args.workload != "yaml":
        build = hpo_command if args.side == "hpo" else raw_command
        cmd = build(work, tmp, f"{args.side}-{work.key}", 2)
    rest = cmd[1:] if args.side == "hpo" else cmd[2:]
    out = tmp / "marks.json"
    env = {**os.environ, "RAY_AIR_NEW_OUTPUT": "0"}
    env.pop("RAY_AUTH_MODE", None)
    env.update(dict(kv.split("=", 1) for kv in args.env))
    start = time.time()
    proc = subprocess.run([sys.executable, __file__, "--child", args.side, str(out), *rest],
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
        if not rows:
            continue
        low = max(r["timestamp"] - r["time_total_s"] for r in rows)
        high = min(r["timestamp"] + 1 - r["time_total_s"] for r in rows)
        begin = (low + high) / 2
        starts.append(begin - start)
        firsts.append(begin + rows[0]["time_total_s"] - start)
    if starts:
        print(f"  first trial function started at {min(starts):.2f} s, first result at "
              f"{min(firsts):.2f} s ({len(starts)} trials; +-0.5 s at worst)")


if __name__ == "__main__":
    main()
