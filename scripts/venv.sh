#!/usr/bin/env bash
# Makes the project's Python environment, .venv (or VENV): the packages of scripts/requirements.txt
# from PyPI, then wccl itself installed the way users install it (`pip install .`: meson-python
# builds libwccl into the package). Prints the environment's python. The requirements are
# installed again only when scripts/requirements.txt changes; wccl is rebuilt on every call.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${VENV:-.venv}"
python="${PYTHON:-python3}"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv" >&2
stamp="$venv/.requirements"
if ! cmp -s scripts/requirements.txt "$stamp"; then
  "$venv/bin/pip" install -q --disable-pip-version-check -r scripts/requirements.txt >&2
  cp scripts/requirements.txt "$stamp"
fi
# NCCL where the CUDA 13 toolkit is (nvcc), for the NCCL local group of wccl_hier_allreduce: the
# build finds it in this environment (cuda/meson.build). Pinned: the release the glue was compiled
# and tested with. Other CUDA majors: install NCCL for them, or build with -Dnccl_dir.
nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
if [ -x "$nvcc" ] && "$nvcc" --version | grep -q 'release 13\.' &&
   ! "$venv/bin/python" -c 'import nvidia.nccl' 2> /dev/null; then
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps 'nvidia-nccl-cu13==2.32.3' >&2
fi
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall . >&2
echo "$PWD/$venv/bin/python"
