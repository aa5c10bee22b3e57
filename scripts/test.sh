#!/usr/bin/env bash
# Every test: installs dependencies, builds, and runs the whole Meson test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
meson test -C "${BUILD_DIR:-build}" --print-errorlogs "$@"
