#!/usr/bin/env bash
# Every test: installs the Debian packages (cmake for the install test), makes the Python
# environment (.venv: torch, pytest, ... from PyPI, and wccl installed into it with `pip install .`),
# builds, and runs the whole Meson test suite; its Python and trainer tests run in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3 python3-venv cmake
python="$(scripts/venv.sh)"
MESON_ARGS="${MESON_ARGS:-} -Dtest_python=$python" scripts/build.sh
WCCL_TEST_INSTALLED=1 meson test -C "${BUILD_DIR:-build}" --print-errorlogs "$@"
