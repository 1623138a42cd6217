#!/usr/bin/env bash
# Collect the shared libraries that binaries built here need and the GPU
# machine lacks (nng, libuv, protobuf-c, mbedTLS, check, jansson, openblas, ...)
# into .devcarry/lib of the current repository, ignored by git.
#
# usage: scripts/device-carry.sh build/daemon/dqnd build/tests/test-gpu ...
# (a copy of the team's device tool, kept here so the repository is self-contained)
# then send .devcarry/ and build/ along with the tree to the GPU machine and start
# the command there with
#   export LD_LIBRARY_PATH=$PWD/.devcarry/lib:$LD_LIBRARY_PATH;
# The GPU machine has its own libc, CUDA runtime and driver: those are skipped.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
dest=$top/.devcarry/lib
mkdir -p "$dest"
grep -qx '/.devcarry/' "$top/.git/info/exclude" 2>/dev/null || echo '/.devcarry/' >>"$top/.git/info/exclude"
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libgcc_s|libstdc\+\+|libcuda\.|libcudart|libcublas|libcurand|libnvrtc|libnccl|libnvidia)'
for bin in "$@"; do
  ldd "$bin" | awk '/=> \//{print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip ]] && continue
    cp -Lu "$path" "$dest/$name"
  done
done
du -sh "$dest" | awk '{print "carried libs: " $1 " in .devcarry/lib"}'
ls "$dest"
