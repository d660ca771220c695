"""Result throughput A/B: this checkout's `hpo run` against an older commit's, alternating,
on 2 trials that each report `--reports` results without a pause (benchmarks/workloads.py
`burst`), hpo's logs on (result.json, progress.csv, TensorBoard, the live view).

Results per second = all reports / (the last report's wall time - the first's), from the
trainables' own clocks: Ray's and the trials' start-up stay out of it. A report blocks its
trial until the driver has taken it, so this is the rate the driver sustains.

    python benchmarks/throughput_ab.py --old 71ad344 --rounds 4 --markdown docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._ab import hpo_run_walls, worktree  # noqa: E402
from benchmarks._common import (  # noqa: E402
    log,
    machine,
    md_table,
    median,
    text_table,
    versions,
    wait_until_quiet,
    write_section,
)

SPEC = """name: burst
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


def one_run(checkout: Path, spec: Path, storage: Path, name: str) -> dict[str, float]:
    timed, walls = hpo_run_walls(checkout, spec, storage, name, timeout_s=900)
    return {"results_per_s": len(walls) / (max(walls) - min(walls)), "results": len(walls),
            "wall_s": timed.wall_s, "other_cpu_s": timed.other_cpu_s}


def measure(args: argparse.Namespace, work: Path) -> list[dict]:
    spec = work / "burst.yaml"
    spec.write_text(SPEC.format(trainable=ROOT / "benchmarks" / "workloads.py:burst",
                                reports=args.reports))
    pairs = []
    with worktree(args.old, work / "old") as old:
        while len(pairs) < args.rounds:
            order = ["old", "new"] if len(pairs) % 2 == 0 else ["new", "old"]
            pair = {}
            for side in order:
                wait_until_quiet(log=log)
                checkout = old if side == "old" else ROOT
                pair[side] = one_run(checkout, spec, work / "runs", f"{side}-{len(pairs)}")
            pairs.append(pair)
            log(f"  pair {len(pairs)}: " + ", ".join(
                f"{s} {pair[s]['results_per_s']:.0f} results/s (other CPU "
                f"{pair[s]['other_cpu_s']:.1f} s)" for s in order))
    return pairs


def report(args: argparse.Namespace, pairs: list[dict], took_s: float) -> str:
    old = [p["old"]["results_per_s"] for p in pairs]
    new = [p["new"]["results_per_s"] for p in pairs]
    ratios = [n / o for n, o in zip(new, old, strict=True)]
    header = ["measure", f"old ({args.old}) median", "new median", "new/old (median of pairs)",
              "per pair"]
    rows = [["results/s", f"{median(old):.0f}", f"{median(new):.0f}",
             f"**{median(ratios):.2f}**", ", ".join(f"{r:.2f}" for r in ratios)]]
    print(text_table(header, [[c.replace("**", "") for c in r] for r in rows]))
    others = ", ".join(f"{p['old']['other_cpu_s']:.0f}/{p['new']['other_cpu_s']:.0f}"
                       for p in pairs)
    command = "python benchmarks/throughput_ab.py " + " ".join(sys.argv[1:])
    return "\n".join([
        "## Result throughput: this checkout against an older commit", "",
        f"Command: `{command}` (run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, took "
        f"{took_s / 60:.1f} min). Machine: {machine()}; {versions()}.", "",
        f"2 trials x {args.reports} reports without a pause (`benchmarks/workloads.py:burst`), "
        f"hpo's logs on, {len(pairs)} pairs, old and new back to back with the order "
        "alternating; results/s from the trainables' own clocks (first to last report). CPU "
        f"seconds other processes used during each run (old/new): {others}.", "",
        md_table(header, rows)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the commit to compare against")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--reports", type=int, default=5000, help="reports per trial")
    parser.add_argument("--markdown", type=Path, help="rewrite the throughput section there")
    args = parser.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hpo-throughput-ab-") as tmp:
        pairs = measure(args, Path(tmp))
    text = report(args, pairs, time.monotonic() - start)
    if args.markdown:
        write_section(args.markdown, "throughput", text)


if __name__ == "__main__":
    main()
