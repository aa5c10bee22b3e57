#!/usr/bin/env bash
# The main job: wccl-perf starts a coordinator and 4 peers on 127.0.0.1, joined by TLS 1.3 links
# (throwaway certificates made for the run), and prints an all-reduce bandwidth table over a size
# sweep. Arguments go to wccl-perf (--tls off, -b/-e/-f, -n, -a ring|tree, --json, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh bench/perf/wccl-perf >/dev/null  # what the benchmark needs, not the tests
if [ $# -eq 0 ]; then set -- -b 4K -e 64M -f 8 -n 10 -w 2; fi
exec "${BUILD_DIR:-build}/bench/perf/wccl-perf" --local 4 "$@"
