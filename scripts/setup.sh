#!/usr/bin/env bash
# Set-up on a fresh machine: .venv with torch, hpo and Horovod (built from source by the
# installer inside the package, `hpo install horovod`, through install-horovod.sh). With --test it adds the test tools and the system programs the tests
# start themselves (a real Slurm, headless Chromium). Safe to run again: done steps are skipped.
# With --wheelhouse DIR nothing is downloaded: every package comes from DIR, which
# scripts/build-wheelhouse.sh makes on a machine with network (for compute nodes without any).
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
wheelhouse=""
while [ $# -gt 0 ]; do
  case "$1" in
    --test) extras="[test]" ;;
    --wheelhouse)
      if [ -z "${2:-}" ] || [ ! -d "$2" ]; then
        echo "setup.sh: --wheelhouse needs an existing folder (scripts/build-wheelhouse.sh DIR)" >&2
        exit 2
      fi
      wheelhouse=$(cd "$2" && pwd)
      shift ;;
    *) echo "usage: scripts/setup.sh [--test] [--wheelhouse DIR]" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$wheelhouse" ]; then
  # pip reads these in every call below, install-horovod's included; a Horovod wheel that
  # build-wheelhouse copied from its cache is used when its key matches this machine.
  export PIP_NO_INDEX=1 PIP_FIND_LINKS="$wheelhouse" HPO_HOROVOD_WHEELS="$wheelhouse/horovod"
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
# torch is pinned: a bare `torch` pulls several GB of CUDA packages onto a CPU machine. On a GPU
# cluster install the CUDA build of this version first; pip then keeps it.
.venv/bin/pip install --quiet "torch==${HPO_TORCH_VERSION:-2.13.0}" -e ".$extras"
PYTHON=.venv/bin/python bash scripts/install-horovod.sh

# System packages the test suite starts (one per line below; the tests say why they need them).
# slurmctld, slurmd, slurm-client, munge: tests/cluster/test_slurm_cluster.py starts a real multi-node
# Slurm (testing/slurm_cluster.py).
test_system_packages=(
  chromium  # tests/reporting/test_report.py renders the HTML report headless: no JS errors, plots drawn
  slurmctld
  slurmd
  slurm-client
  munge
  lmod  # a real `module` in the test cluster's jobs (site modules; tests/cluster/test_slurm_testcluster.py)
)
if [ -n "$extras" ] && [ ${#test_system_packages[@]} -gt 0 ]; then
  missing=()
  for package in "${test_system_packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ] && [ -n "$wheelhouse" ]; then
    echo "setup.sh: offline, so not installing ${missing[*]} (the Slurm and report tests need them)"
  elif [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    # A policy-rc.d keeps the packages' init scripts from starting system-wide daemons.
    own_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      own_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    [ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d
  fi
fi
