#!/usr/bin/env bash
# Builds a wheelhouse for installing hpo on a machine without network (scripts/setup.sh
# --wheelhouse DIR): hpo's dependencies and torch as wheels, Horovod's sdist, and the Horovod
# wheels built on this machine (HPO_WHEEL_CACHE). Run it where there is network, e.g. for a
# node with Python 3.12 and CUDA 13:
#   scripts/build-wheelhouse.sh wheels --python-version 3.12 --platform manylinux_2_28_x86_64 \
#     --extra-index-url https://download.pytorch.org/whl/cu130 --trim-ray
# The same as `hpo install wheelhouse DIR ...`; options: --help.
set -euo pipefail
python=${PYTHON:-python3}
if ! "$python" -c "import hpo.install" 2>/dev/null; then
  export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
fi
exec "$python" -m hpo.install wheelhouse "$@"
