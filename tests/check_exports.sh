#!/bin/sh
# libwccl.so must export the C API and nothing else.
set -eu
lib="$1"
syms=$(nm -D --defined-only "$lib" | awk '{print $3}')
[ -n "$syms" ] || { echo "no exported symbols in $lib"; exit 1; }
bad=$(printf '%s\n' "$syms" | grep -v '^wccl_' || true)
if [ -n "$bad" ]; then
  echo "symbols exported without the wccl_ prefix:"; printf '%s\n' "$bad"; exit 1
fi
echo "$(printf '%s\n' "$syms" | wc -l) exported symbols, all wccl_*"
