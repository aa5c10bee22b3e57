#!/usr/bin/env bash
# Installs the build tree into a staging root (meson install --destdir) and builds
# tests/install/consumer.cc against it twice, as users do: with CMake (find_package(wccl CONFIG),
# the imported target wccl::wccl) and with pkg-config (wccl.pc, through PKG_CONFIG_SYSROOT_DIR);
# each program then runs a 3-peer all-reduce. Usage: check.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

meson install -C "$build" --no-rebuild --quiet --destdir "$stage/root"
config=$(find "$stage/root" -name wcclConfig.cmake)
pc=$(find "$stage/root" -name wccl.pc)
[[ -n $config && -n $pc ]] || { echo "the install has no wcclConfig.cmake or wccl.pc" >&2; exit 1; }
prefix=${config%/lib*/cmake/wccl/wcclConfig.cmake}
echo "installed: $config, $pc"

# CMake: find_package from the staged prefix. The program runs without LD_LIBRARY_PATH: CMake puts
# the imported library's directory in the build tree's RPATH, so it runs the installed library.
cmake -S "$here" -B "$stage/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$stage/cmake.log" \
  || { cat "$stage/cmake.log" >&2; exit 1; }
cmake --build "$stage/cmake" > "$stage/cmake-build.log" 2>&1 || { cat "$stage/cmake-build.log" >&2; exit 1; }
ldd "$stage/cmake/consumer" > "$stage/ldd.log"
grep -q "libwccl.so.* => $stage/root/" "$stage/ldd.log" \
  || { echo "the CMake-built program does not load the installed libwccl:" >&2; cat "$stage/ldd.log" >&2; exit 1; }
"$stage/cmake/consumer"

# pkg-config: the .pc's paths are under the prefix it was installed for; the sysroot maps them
# into the staging root.
export PKG_CONFIG_SYSROOT_DIR="$stage/root" PKG_CONFIG_LIBDIR=$(dirname "$pc")
libdir=$(pkg-config --libs-only-L wccl)
libdir=${libdir#-L}
libdir=${libdir%% *}
[[ $libdir == "$stage/root/"* ]] || { echo "pkg-config's libdir $libdir is not in the install" >&2; exit 1; }
cd "$here"  # the README's command, as written there
c++ consumer.cc $(pkg-config --cflags --libs wccl) -pthread -o "$stage/consumer-pc"
LD_LIBRARY_PATH=$libdir "$stage/consumer-pc"
