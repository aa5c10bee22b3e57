#!/usr/bin/env bash
# The main job: two processes on 127.0.0.1 joined by one TLS 1.3 link (throwaway certificates
# made for the run) print a bandwidth table. Arguments go to wccl-loopback-demo (--tls off, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec "${BUILD_DIR:-build}/examples/wccl-loopback-demo" "$@"
