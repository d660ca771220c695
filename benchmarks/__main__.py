"""`python -m benchmarks NAME [args]`: run one benchmark of the registry; `--list` names them.

The shared flags are parsed here, once, for every benchmark; a benchmark adds its own
(`python -m benchmarks NAME --help` shows both). --json writes what the benchmark returns.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from benchmarks import REGISTRY, Benchmark


def listing() -> str:
    width = max(map(len, REGISTRY))
    return "\n".join(f"{name:<{width}}  {b.summary}" for name, b in REGISTRY.items())


def parser_for(bench: Benchmark) -> argparse.ArgumentParser:
    description = (f"{bench.summary}.\n\nworkload: {bench.workload}\nsides: "
                   f"{', '.join(bench.sides)}\nmetrics: {', '.join(bench.metrics)}\n"
                   f"sections of docs/benchmarks.md: {', '.join(bench.sections) or 'none'}")
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks {bench.name}",
                                     description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = parser.add_argument_group("shared flags")
    if bench.rounds is not None:
        shared.add_argument("--rounds", type=int,
                            help=f"rounds (repeats, pairs) to measure (default {bench.rounds})")
    if bench.quick is not None:
        shared.add_argument("--quick", action="store_true", help=f"sanity run: {bench.quick}")
    shared.add_argument("--json", type=Path, help="write the measurements to this file")
    if bench.sections:
        shared.add_argument("--markdown", type=Path, metavar="FILE",
                            help="rewrite this benchmark's section of FILE "
                            "(docs/benchmarks.md)")
    if bench.old is not None:
        shared.add_argument("--old", metavar="REV", help=bench.old)
    bench.resolve("flags")(parser)
    parser.set_defaults(rounds=None, quick=False, markdown=None, old=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: python -m benchmarks NAME [args] | --list\n\n{listing()}")
        return 0
    if argv[0] == "--list":
        print(listing())
        return 0
    bench = REGISTRY.get(argv[0])
    if bench is None:
        print(f"no benchmark {argv[0]!r}; these are: {', '.join(REGISTRY)}", file=sys.stderr)
        return 2
    args = parser_for(bench).parse_args(argv[1:])
    args.rounds_default = args.rounds is None  # a benchmark may default by mode
    if args.rounds_default:
        args.rounds = bench.rounds
    args.command = shlex.join(["python", "-m", "benchmarks", *argv])
    args.started = time.monotonic()
    measured = bench.resolve("run")(args)
    if args.json and measured is not None:
        args.json.write_text(json.dumps(measured, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
