"""Plain Ray Tune doing the same work as `hpo run` in benchmarks/overhead.py, at Ray Tune's
best settings for it: actor reuse, verbose=0, the legacy (silent) reporter, no dashboard,
worker logs not forwarded, 2 CPUs and 1 CPU per trial, FIFO + random (the hpo defaults).

Run from the repository root:  python benchmarks/raw_tune_overhead.py sleep --trials 40
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # the same reporter hpo selects
# Ray 2.60 turns token auth on for a local ray.init() when RAY_AUTH_MODE is unset and saves a
# token in ~/.ray/auth_token; the benchmark must not leave that behind (hpo uses a private
# per-run token instead). The brief does not require token auth on the raw side.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `benchmarks.workloads` by name, as hpo imports it
    sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=["sleep", "stream"])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--sleep-s", type=float, default=1.0)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--storage", default=None, help="results root (default: a temp dir)")
    parser.add_argument("--name", default="raw")
    args = parser.parse_args()

    import ray
    from ray import tune

    from benchmarks.workloads import raw_sleep_once, raw_stream

    if args.workload == "sleep":
        func, constants = raw_sleep_once, {"sleep_s": args.sleep_s}
    else:
        func, constants = raw_stream, {"rate": args.rate, "duration_s": args.duration_s}
    storage = args.storage or tempfile.mkdtemp(prefix="raw-tune-")
    temp_dir = tempfile.mkdtemp(prefix="rawray-", dir="/tmp")  # fresh, as hpo's is
    try:
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING, _temp_dir=temp_dir)
        tuner = tune.Tuner(
            tune.with_resources(func, {"cpu": 1}),
            param_space=constants,
            tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=args.trials,
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


if __name__ == "__main__":
    main()
