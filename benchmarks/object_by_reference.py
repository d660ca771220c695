"""Large objects by reference, and the embedded Ray kept between runs (issue 19).

One process, as a notebook would do it: a run without data starts Ray (cold: also the first
imports), the same run again reuses it (warm), one bare `ray.put` of the array, the run with
the array passed as `parameters` to every trial (each trial sums all of it), and after
`hpo.shutdown()` the same run once more (Ray started again, imports already done: the
start-up a kept Ray saves is this minus warm). For each: wall
time, the driver's peak RSS above its level before, and the peak of the object store's shared
memory (/dev/shm pages in use) above its level before, sampled every 20 ms.

    python benchmarks/object_by_reference.py --mb 500 --trials 8 --markdown docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import hpo  # noqa: E402
from benchmarks._common import machine, md_table, versions, write_section  # noqa: E402

MB = 2**20


def touch(config: dict[str, Any], data: np.ndarray | None = None) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=500)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
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


def _report(args: argparse.Namespace, rows: dict[str, dict[str, float]], puts: int) -> None:
    table = md_table(["what", "wall s", "driver peak RSS +MB", "object store peak +MB"],
                     [[k, f"{v['wall_s']:.2f}", f"{v['driver_mb']:.0f}", f"{v['store_mb']:.0f}"]
                      for k, v in rows.items()])
    values = list(rows.values())
    text = (f"## Python API: objects by reference, Ray kept between runs "
            f"(`benchmarks/object_by_reference.py`)\n\n"
            f"{machine()}; {versions()}. A {args.mb} MB numpy array, {args.trials} one-report "
            f"trials, {args.cpus} CPUs, one Python process as in a notebook:\n\n{table}\n\n"
            f"- `ray.put` calls during the run with data: {puts} (one per object and run).\n"
            f"- The data costs the run {values[3]['wall_s'] - values[1]['wall_s']:+.2f} s over "
            f"the same warm run without it; one bare put takes {values[2]['wall_s']:.2f} s.\n"
            f"- Start-up saved by the kept Ray: {values[4]['wall_s'] - values[1]['wall_s']:.2f}"
            " s (Ray started again minus warm run).\n\n"
            f"Command: `python benchmarks/object_by_reference.py --mb {args.mb} --trials "
            f"{args.trials} --cpus {args.cpus} --markdown docs/benchmarks.md`\n")
    print(text)
    if args.markdown:
        write_section(args.markdown, "object-by-reference", text)


if __name__ == "__main__":
    main()
