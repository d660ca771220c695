#!/usr/bin/env bash
# Builds a wheelhouse for installing hpo on a machine without network (scripts/setup.sh
# --wheelhouse DIR): hpo's dependencies and torch as wheels, Horovod's sdist, and the Horovod
# wheels built on this machine (HPO_WHEEL_CACHE). Run it where there is network, e.g. for a
# node with Python 3.12 and CUDA 13:
#   scripts/build-wheelhouse.sh wheels --python-version 3.12 --platform manylinux_2_28_x86_64 \
#     --extra-index-url https://download.pytorch.org/whl/cu130 --trim-ray
# Options: scripts/wheelhouse.py --help.
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/wheelhouse.py" "$@"
