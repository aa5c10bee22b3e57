#!/usr/bin/env bash
# Installs the Debian packages wccl builds with, plus any named as arguments (scripts/test.sh adds
# Python's venv, CI the sanitizer toolchains). Idempotent: does nothing when they are all present.
# Needs root (or sudo). The Python packages (torch, numpy, pytest, ...) come from PyPI into .venv
# (scripts/venv.sh), never from Debian.
set -euo pipefail
packages=(
  build-essential meson ninja-build pkg-config
  libuv1-dev libssl-dev libzstd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  openssl
  "$@"
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
