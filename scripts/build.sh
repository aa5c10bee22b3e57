#!/usr/bin/env bash
# Configures and builds wccl in BUILD_DIR (default build/): every target, or the Ninja targets
# named as arguments (scripts/demo.sh builds wccl-perf alone). Extra Meson options come from
# MESON_ARGS, e.g. MESON_ARGS="-Dwerror=true", at the first configuration and on later calls too.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
# The CUDA toolkit's usual home, so that Meson finds nvcc and builds the GPU kernels.
if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if [ ! -f "$build_dir/build.ninja" ]; then
  # shellcheck disable=SC2086
  meson setup "$build_dir" ${MESON_ARGS:-}
elif [ -n "${MESON_ARGS:-}" ]; then
  # shellcheck disable=SC2086
  meson setup --reconfigure "$build_dir" ${MESON_ARGS}
fi
ninja -C "$build_dir" "$@"
