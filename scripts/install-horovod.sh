#!/usr/bin/env bash
# Builds horovod 0.28.1 (the latest release) against the torch already installed in PYTHON's
# environment. Its CMake pins C++14 while torch >= 2.1 needs C++17, so the C++ compiler is a
# small wrapper that raises the standard. Gloo is always built (CPU, tests); NCCL is added when
# torch is a CUDA build; MPI, TensorFlow and MXNet are left out.
set -euo pipefail
python=${PYTHON:-python3}

if "$python" -c "import horovod.torch" 2>/dev/null; then
  echo "horovod already installed: $("$python" -c 'import horovod; print(horovod.__version__)')"
  exit 0
fi

wrapper_dir=$(mktemp -d)
trap 'rm -rf "$wrapper_dir"' EXIT
real_cxx=$(command -v "${CXX:-g++}")
cat > "$wrapper_dir/cxx17" <<WRAPPER
#!/usr/bin/env bash
args=()
for arg in "\$@"; do
  case "\$arg" in -std=c++14|-std=gnu++14) arg=-std=gnu++17 ;; esac
  args+=("\$arg")
done
exec "$real_cxx" "\${args[@]}"
WRAPPER
chmod +x "$wrapper_dir/cxx17"

export CXX="$wrapper_dir/cxx17" HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
if [ "$("$python" -c 'import torch; print(torch.version.cuda is not None)')" = True ]; then
  export HOROVOD_GPU_OPERATIONS=NCCL
  nccl_home=$("$python" - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("nvidia.nccl")
print(pathlib.Path(list(spec.submodule_search_locations)[0]) if spec else "")
PY
)
  [ -n "$nccl_home" ] && export HOROVOD_NCCL_HOME="$nccl_home" HOROVOD_NCCL_LINK=SHARED
fi

"$python" -m pip install --quiet setuptools wheel cmake packaging
# --no-cache-dir: a cached wheel would keep the ABI of the torch it was first built against.
MAKEFLAGS="-j$(nproc)" "$python" -m pip install --no-build-isolation --no-cache-dir \
  horovod==0.28.1
"$python" -c "import horovod.torch as hvd; print('horovod', __import__('horovod').__version__, \
'gloo' if hvd.gloo_built() else '', 'nccl' if hvd.nccl_built() else '')"
