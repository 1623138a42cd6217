#!/usr/bin/env bash
# The README's run command: installs what is missing, builds, and trains the
# learner on the built-in meanrev environment, printing the learning curve.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
cuda=disabled; command -v nvcc >/dev/null && cuda=enabled
[ -f build/build.ninja ] || meson setup build -Dcuda=$cuda
meson compile -C build
exec ./build/client/dqn-demo "$@"
