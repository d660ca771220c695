#!/usr/bin/env bash
# Installs horovod 0.28.1 (the latest release) into PYTHON's environment, built against the
# torch installed there: Gloo always, NCCL when torch is a CUDA build, RCCL for ROCm 5.
# scripts/install_horovod.py decides the build from the toolchain found (horovod_build.py) and
# keeps built wheels in HPO_WHEEL_CACHE (default ~/.cache/hpo/wheels), so the next venv with
# the same torch, Python and compiler installs in seconds. Options: --rebuild, --probe.
set -euo pipefail
python=${PYTHON:-python3}

if [ $# -eq 0 ] && "$python" -c "import horovod.torch" 2>/dev/null; then
  echo "horovod already installed: $("$python" -c 'import horovod; print(horovod.__version__)')"
  exit 0
fi
exec "$python" "$(dirname "$0")/install_horovod.py" "$@"
