#!/usr/bin/env bash
# The README's run command: installs what is missing, builds, and trains the
# learner on the built-in meanrev environment, printing the learning curve.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/client/dqn-demo "$@"
