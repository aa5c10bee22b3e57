#!/usr/bin/env bash
# Formats the C, C++ and CUDA sources with clang-format 14 (Debian 12's) and .clang-format:
#   scripts/format.sh          rewrites every file that differs
#   scripts/format.sh --check  changes nothing; lists each difference and fails if there is one (CI)
# The version is pinned because clang-format's output changes between releases.
set -euo pipefail
cd "$(dirname "$0")/.."
formatter=clang-format-14
command -v "$formatter" > /dev/null || scripts/install-deps.sh clang-format-14
mapfile -t files < <(git ls-files '*.c' '*.cc' '*.h' '*.cu' '*.cuh')
[ ${#files[@]} -gt 0 ] || { echo "format.sh: no sources found (not a git checkout?)" >&2; exit 1; }
case "${1:-}" in
  --check)
    if ! "$formatter" --dry-run --Werror "${files[@]}"; then
      echo "format.sh: the files above are not formatted; run scripts/format.sh" >&2
      exit 1
    fi ;;
  "") "$formatter" -i "${files[@]}" ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac
