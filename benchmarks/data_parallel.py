"""Data-parallel trials through `hpo run`: scaling efficiency (Horovod and DDP side by side),
an adaptive batch-size schedule against a fixed small batch, and the start-up cost of a
2-rank trial against a 1-process trial. All runs use the built-in trainables/images.py.

    python benchmarks/data_parallel.py                      # all three, prints the tables
    python benchmarks/data_parallel.py --only scaling --repeats 3
    python benchmarks/data_parallel.py --markdown docs/benchmarks.md

Scaling efficiency is strong scaling: the same global batch and epoch on 1 rank and on 2
ranks (one thread each), T1 / (2 x T2) from the median epoch time (first epoch skipped).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import (  # noqa: E402
    env_with_root,
    hpo_run_command,
    log,
    machine,
    md_table,
    median,
    run_when_quiet,
    text_table,
    versions,
    write_section,
)

IMAGES = {"trainable": "trainables.images:train", "metric": "val_accuracy", "mode": "max"}


def _experiment(tmp: Path, name: str, constants: dict[str, Any], backend: str | None,
                workers: int, samples: int = 1, env: dict[str, str] | None = None
                ) -> tuple[list[dict], float]:
    """Run one `hpo run` of the image trainable: every result of every trial, and its wall
    time."""
    spec: dict[str, Any] = {"name": name, **IMAGES, "num_samples": samples,
                            "max_concurrent": 1, "constants": constants}
    if backend:
        spec["distributed"] = {"backend": backend, "workers": workers, "cpus_per_worker": 1,
                               "env": env or {}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    cmd = hpo_run_command(path, tmp / "results", name, cpus=2)
    timed = run_when_quiet(cmd, env=env_with_root(),
                           quiet_timeout=300, run_timeout=1800)
    if timed.returncode:
        raise SystemExit(f"{name} failed:\n{timed.stderr[-2000:]}")
    rows = []
    for result in sorted((tmp / "results" / name).glob("*/result.json")):
        rows += [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
    log(f"  {name}: {timed.wall_s:.1f}s wall, other CPU {timed.other_cpu_s:.1f}s")
    return rows, timed.wall_s


def scaling(tmp: Path, repeats: int) -> tuple[list[str], list[list[Any]]]:
    constants = {"epochs": 4, "batch_size": 256, "train_size": 4096, "val_size": 512,
                 "image_size": 32, "width": 32}
    epoch_s: dict[tuple[str, int], list[float]] = {}
    for repeat in range(repeats):
        for backend in ("horovod", "ddp"):
            for workers in (1, 2):
                rows, _ = _experiment(tmp, f"scale-{backend}-{workers}-{repeat}", constants,
                                      backend, workers)
                epoch_s.setdefault((backend, workers), []).extend(
                    row["time_this_iter_s"] for row in rows[1:])
    table = []
    for backend in ("horovod", "ddp"):
        t1, t2 = median(epoch_s[(backend, 1)]), median(epoch_s[(backend, 2)])
        table.append([backend, f"{t1:.2f}", f"{t2:.2f}", f"{t1 / (2 * t2):.2f}"])
    return ["backend", "epoch s, 1 rank", "epoch s, 2 ranks", "efficiency T1/(2 T2)"], table


def _time_to(rows: list[dict], target: float) -> float | None:
    for row in rows:
        if row["val_accuracy"] >= target:
            return float(row["time_total_s"])
    return None


BATCH_BASE = {"epochs": 10, "lr": 0.02, "noise": 2.0, "batch_size": 64, "width": 8,
              "train_size": 16384}
GROWTH = {"batch_schedule": {"max": 1024, "double_every": 2, "lr_rule": "sqrt", "ramp_steps": 50}}


def batch_schedule(tmp: Path, backend: str, overrides: dict[str, Any]
                   ) -> tuple[list[str], list[list[Any]]]:
    base = {key: value for key, value in {**BATCH_BASE, **overrides}.items()
            if key != "batch_schedule"}
    big = {**GROWTH, **overrides, **base}
    fixed, _ = _experiment(tmp, f"batch-fixed-{backend}", base, backend, 2)
    adaptive, _ = _experiment(tmp, f"batch-adaptive-{backend}", big, backend, 2)
    best_fixed = max(row["val_accuracy"] for row in fixed)
    best_adaptive = max(row["val_accuracy"] for row in adaptive)
    target = min(best_fixed, best_adaptive)  # the accuracy both reached
    table = []
    growth = big["batch_schedule"]
    switch = (f"{base['batch_size']}, doubling every {growth['double_every']} epochs to "
              f"{growth['max']}")
    for label, rows in ((f"fixed {base['batch_size']}", fixed), (switch, adaptive)):
        reached = _time_to(rows, target)
        table.append([label, f"{max(r['val_accuracy'] for r in rows):.3f}",
                      f"{rows[-1]['time_total_s']:.1f}",
                      f"{reached:.1f}" if reached is not None else "not reached"])
    t_fixed, t_adaptive = _time_to(fixed, target), _time_to(adaptive, target)
    speedup = f"{t_fixed / t_adaptive:.2f}x" if t_fixed and t_adaptive else "n/a"
    table.append([f"speed-up to accuracy {target:.3f}; accuracy lost "
                  f"{100 * (best_fixed - best_adaptive):+.1f} points", "", "", speedup])
    epochs = base["epochs"]
    return ["global batch (2 ranks)", "best accuracy", f"{epochs} epochs, s",
            "time to target, s"], table


def startup(tmp: Path, trials: int) -> tuple[list[str], list[list[Any]]]:
    tiny = {"epochs": 1, "train_size": 64, "val_size": 16, "batch_size": 32}
    table, per_trial = [], {}
    for label, backend, workers in (("1 process", None, 1), ("2 Horovod ranks", "horovod", 2),
                                    ("2 DDP ranks", "ddp", 2)):
        # trials run one after another: the extra trials of the longer run cost whole lives
        _, one = _experiment(tmp, f"start-{backend}-1", tiny, backend, workers, samples=1)
        _, many = _experiment(tmp, f"start-{backend}-{trials}", tiny, backend, workers,
                              samples=trials)
        per_trial[label] = (many - one) / (trials - 1)
        table.append([label, f"{per_trial[label]:.2f}"])
    base = per_trial["1 process"]
    for row in table:
        extra = per_trial[row[0]] - base
        # A 1-process trial with actor reuse can cost less than this estimator's noise (even
        # below zero): a ratio to it would mean nothing.
        ratio = (f"{per_trial[row[0]] / base:.2f}" if base > 0.05
                 else "n/a (1-process cost in noise)")
        row += [f"{extra:+.2f}", ratio]
    return ["trial", "s per trial", "extra s", "ratio"], table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["scaling", "batch", "startup"], action="append")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--batch-backend", default="horovod", choices=["horovod", "ddp"])
    parser.add_argument("--batch-config", default="{}",
                        help="JSON overrides of the batch comparison's trainable config")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    parts = args.only or ["scaling", "batch", "startup"]
    sections = []
    with tempfile.TemporaryDirectory(prefix="hpo-bench-dp-") as tmp:
        for part in parts:
            log(f"{part} ...")
            header, rows = {"scaling": lambda: scaling(Path(tmp), args.repeats),
                            "batch": lambda: batch_schedule(Path(tmp), args.batch_backend,
                                                            json.loads(args.batch_config)),
                            "startup": lambda: startup(Path(tmp), args.trials)}[part]()
            log(text_table(header, rows))
            sections.append((part, header, rows))
    if args.markdown:
        command = "python benchmarks/data_parallel.py " + " ".join(sys.argv[1:])
        body = [f"Measured with `{command}` on {machine()}; {versions()}, horovod 0.28.1 "
                "(Gloo). Trainable: `trainables.images:train` (synthetic images); one thread "
                "per rank; each row is whole `hpo run`s of the real CLI."]
        body += [f"\n**{part}**\n\n{md_table(header, rows)}" for part, header, rows in sections]
        write_section(args.markdown, "data-parallel", "\n".join(body))


if __name__ == "__main__":
    main()
