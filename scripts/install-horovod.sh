#!/usr/bin/env bash
# Installs horovod 0.28.1 into PYTHON's environment, built against the torch installed there:
# Gloo always, NCCL when torch is a CUDA build, RCCL for ROCm 5. A thin caller of the installer
# that ships inside the package (hpo/install/horovod/): `hpo install horovod --help` lists the
# options (--cuda [VERSION], --arch LIST, --wheelhouse DIR, --probe, --rebuild). Built wheels are
# kept in HPO_WHEEL_CACHE (default ~/.cache/hpo/wheels).
set -euo pipefail
python=${PYTHON:-python3}

if [ $# -eq 0 ] && "$python" -c "import horovod.torch" 2>/dev/null; then
  echo "horovod already installed: $("$python" -c 'import horovod; print(horovod.__version__)')"
  exit 0
fi
if ! "$python" -c "import hpo.install" 2>/dev/null; then
  # hpo not installed in that Python: run the installer from this checkout.
  export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
fi
exec "$python" -m hpo.install horovod "$@"
