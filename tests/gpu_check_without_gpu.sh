#!/bin/sh
# scripts/gpu-check.sh, run as the docs show, on a machine where nvidia-smi finds no GPU (a stand-in
# nvidia-smi that fails comes first on PATH, so this holds on GPU machines too): it must say so,
# build nothing and exit 0.
set -eu
script="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9\n' > "$dir/nvidia-smi"
chmod +x "$dir/nvidia-smi"
out=$(PATH="$dir:$PATH" BUILD_DIR="$dir/build" "$script") || { echo "exited $?: $out"; exit 1; }
echo "$out"
echo "$out" | grep -q "no NVIDIA GPU on this machine" || { echo "it did not say that no GPU was found"; exit 1; }
[ ! -e "$dir/build" ] || { echo "it configured a build"; exit 1; }
