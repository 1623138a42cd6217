#!/usr/bin/env bash
# Installs the Debian 12 packages dqnd builds and tests with (as root, or
# through sudo). Idempotent: does nothing when everything is present.
set -euo pipefail
pkgs=(meson ninja-build pkg-config gcc libnng-dev protobuf-c-compiler libprotobuf-c-dev
      libuv1-dev check libjansson-dev libopenblas-dev libsystemd-dev valgrind
      protobuf-compiler python3-protobuf python3-numpy python3-optuna python3-sqlalchemy python3-psycopg2
      postgresql openssl python3-prometheus-client clang-14 libclang-rt-14-dev llvm-14
      systemd util-linux python3-matplotlib)
# --list: the packages, one line (.ci/run installs them with apt-get itself)
[ "${1:-}" = --list ] && { echo "${pkgs[*]}"; exit 0; }
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "installing: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
