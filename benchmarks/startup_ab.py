"""Start-up A/B: this checkout's `hpo run` against an older commit's, alternating, on the
same 2-trial, 2-epoch images spec (trainables.images through benchmarks/timed_images.py).
Per run: the whole wall time and the time from the process start to the first result;
and the time `hpo --help` takes.

    python benchmarks/startup_ab.py --old fe2f168 --rounds 8 --markdown docs/benchmarks.md
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
    run_timed,
    text_table,
    versions,
    wait_until_quiet,
    write_section,
)

SPEC = f"""name: startup
trainable: {ROOT / 'benchmarks' / 'timed_images.py'}:train
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


def one_run(checkout: Path, spec: Path, storage: Path, name: str) -> dict[str, float]:
    """`hpo run` from `checkout`, then `hpo --help` there."""
    timed, walls = hpo_run_walls(checkout, spec, storage, name, timeout_s=300)
    helped = run_timed([sys.executable, "-m", "hpo", "--help"], cwd=checkout, timeout_s=60)
    if helped.returncode:
        raise SystemExit(f"hpo --help failed in {checkout}:\n{helped.stderr[-2000:]}")
    return {"wall_s": timed.wall_s, "first_result_s": min(walls) - timed.start_epoch,
            "help_s": helped.wall_s, "other_cpu_s": timed.other_cpu_s + helped.other_cpu_s}


def measure(args: argparse.Namespace, work: Path) -> tuple[list[dict], int]:
    spec = work / "startup.yaml"
    spec.write_text(SPEC)
    pairs, dropped = [], 0
    with worktree(args.old, work / "old") as old:
        while len(pairs) < args.rounds:
            order = ["old", "new"] if len(pairs) % 2 == 0 else ["new", "old"]
            pair = {}
            for side in order:
                wait_until_quiet(log=log)
                checkout = old if side == "old" else ROOT
                name = f"{side}-{len(pairs)}-{dropped}"
                pair[side] = one_run(checkout, spec, work / "runs", name)
            if max(p["other_cpu_s"] for p in pair.values()) > args.max_other_cpu:
                dropped += 1
                if dropped > args.max_dropped:
                    raise SystemExit(f"{dropped} pairs disturbed by other processes: the "
                                     "machine is too busy to measure start-up; try later")
                log(f"  pair dropped: other processes used {pair['old']['other_cpu_s']:.1f}/"
                    f"{pair['new']['other_cpu_s']:.1f} CPU s")
                continue
            pairs.append(pair)
            log(f"  pair {len(pairs)}: " + ", ".join(
                f"{s} first {pair[s]['first_result_s']:.2f} s wall {pair[s]['wall_s']:.2f} s"
                for s in order))
    return pairs, dropped


def report(args: argparse.Namespace, pairs: list[dict], dropped: int, took_s: float) -> str:
    rows = []
    for key, label in (("first_result_s", "first result"), ("wall_s", "whole run"),
                       ("help_s", "`hpo --help` exits")):
        old = [p["old"][key] for p in pairs]
        new = [p["new"][key] for p in pairs]
        ratios = [p["new"][key] / p["old"][key] for p in pairs]
        rows.append([label, f"{median(old):.2f} s", f"{median(new):.2f} s",
                     f"**{median(ratios):.3f}**", ", ".join(f"{r:.2f}" for r in ratios)])
    header = ["from process start to", f"old ({args.old}) median", "new median",
              "new/old (median of pairs)", "per pair"]
    print(text_table(header, [[c.replace("**", "") for c in r] for r in rows]))
    command = "python benchmarks/startup_ab.py " + " ".join(sys.argv[1:])
    return "\n".join([
        "## Start-up: this checkout against an older commit", "",
        f"Command: `{command}` (run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, took "
        f"{took_s / 60:.1f} min). Machine: {machine()}; {versions()}.", "",
        f"A 2-trial, 2-epoch `trainables.images` spec (ASHA + TPE, 2 CPUs), {len(pairs)} pairs, "
        "old and new back to back with the order alternating; the first result's time comes "
        "from the trainable's own clock (`benchmarks/timed_images.py`). Pairs thrown away "
        f"because other processes used more than {args.max_other_cpu:g} CPU s: {dropped}.", "",
        md_table(header, rows)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the commit to compare against")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--max-other-cpu", type=float, default=2.0)
    parser.add_argument("--max-dropped", type=int, default=8)
    parser.add_argument("--markdown", type=Path, help="rewrite the startup section of this file")
    args = parser.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hpo-startup-ab-") as tmp:
        pairs, dropped = measure(args, Path(tmp))
    text = report(args, pairs, dropped, time.monotonic() - start)
    if args.markdown:
        write_section(args.markdown, "startup", text)


if __name__ == "__main__":
    main()
