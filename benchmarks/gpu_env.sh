# Sourced on the GPU machine in every call (each call is a new shell): the bundle's packages in /tmp/site
# (installed by `benchmarks/gpu_bundle.sh install`), this tree's ampconfig ahead of the bundled wheel (so the
# benchmark measures the code that was sent, even if the bundle is older), and the CUDA 13 libraries that torch's
# venv carries (onnxruntime-gpu finds cuBLAS/cuDNN only through LD_LIBRARY_PATH there).
_ampconfig_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$_ampconfig_repo:/tmp/site" PATH="/tmp/site/bin:$PATH" PYTHONUNBUFFERED=1
# "|| true": sourced under `set -euo pipefail` (gpu_bundle.sh install), a missing folder must not end the caller.
LD_LIBRARY_PATH=$( (find /opt/torch/.venv/lib/python3.12/site-packages/nvidia -name 'lib*.so*' -printf '%h\n' \
  2>/dev/null || true) | sort -u | tr '\n' ':')/usr/local/cuda-13.0/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
unset _ampconfig_repo
