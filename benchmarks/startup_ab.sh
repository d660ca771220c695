#!/bin/bash
# A/B of hpo's start-up: a 2-trial, 1-epoch digits run with an older commit's hpo (OLD, default
# 8fea8a0: the trainable imported before ray.init) and this checkout's, alternating, N rounds.
# Prints each run's whole wall time and its first result's time after the start (Ray's result
# timestamps have 1 s resolution). Run from the repository root with the venv built:
#     bash benchmarks/startup_ab.sh [OLD] [N]
set -euo pipefail
old_rev=${1:-8fea8a0}
rounds=${2:-4}
here=$(pwd)
py="$here/.venv/bin/python"
work=$(mktemp -d /tmp/hpo-ab-XXXXXX)
trap 'git -C "$here" worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$here" worktree add -q -f "$work/old" "$old_rev"
cat > "$work/ab.yaml" <<'YAML'
name: ab
trainable: trainables.digits:train
metric: val_accuracy
mode: max
num_samples: 2
search_space:
  lr: {loguniform: [0.01, 0.1]}
constants: {epochs: 1}
YAML
for round in $(seq "$rounds"); do
  for side in old new; do
    dir="$work/old"; [ "$side" = new ] && dir="$here"
    start=$(date +%s.%N)
    (cd "$dir" && "$py" -m hpo run "$work/ab.yaml" --storage "$work/runs" \
        --name "$side-$round" >/dev/null 2>&1)
    end=$(date +%s.%N)
    "$py" - "$work/runs/$side-$round" "$start" "$end" "$side" "$round" <<'PY'
import json, pathlib, sys
exp, start, end, side, rnd = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:]
stamps = [json.loads(line)["timestamp"] for f in pathlib.Path(exp).glob("*/result.json")
          for line in f.read_text().splitlines() if line.strip()]
print(f"{side} round {rnd}: wall {end - start:.2f} s, first result after "
      f"{min(stamps) - start:.1f} s")
PY
  done
done
