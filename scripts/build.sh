#!/usr/bin/env bash
# Configures (once) and builds wccl in BUILD_DIR (default build/). Extra Meson options for the
# first configuration come from MESON_ARGS, e.g. MESON_ARGS="-Dwerror=true".
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
fi
ninja -C "$build_dir"
