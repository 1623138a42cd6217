#!/usr/bin/env bash
# Shared by run.sh and test.sh: install what is missing, configure once (CUDA
# on when nvcc is found), build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
cuda=disabled; command -v nvcc >/dev/null && cuda=enabled
[ -f build/build.ninja ] || meson setup build -Dcuda=$cuda
meson compile -C build
