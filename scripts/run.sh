#!/usr/bin/env bash
# The README's run command: installs what is missing, builds, starts dqnd on
# its embedded default (this user's ipc socket and state directory, the best
# backend) and runs `dqnctl demo` against it: the learning curve of the
# built-in environment. At the end the demo's trainer is destroyed (its files
# move to STATE_DIR/.retired/) unless --keep is given, and the daemon is
# stopped (SIGTERM: final checkpoints).
#   scripts/run.sh [--keep] [dqnctl demo options, e.g. --iterations 100 --env deepsea]
# If a dqnd already answers on that socket, or holds that state directory,
# it says so and changes nothing. The binaries stay in build/ (README, "Where
# things are").
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
args=()
for a in "$@"; do
  if [ "$a" = --keep ]; then keep=1; else args+=("$a"); fi
done
bash scripts/build.sh
dqnd=./build/daemon/dqnd dqnctl=./build/client/dqnctl
conf=$("$dqnd" --print-config)
url=$(sed -n 's/^listen = //p' <<<"$conf" | head -1)
state=$(sed -n 's/^state-dir = //p' <<<"$conf")
if "$dqnctl" --url "$url" --timeout 1000 health >/dev/null 2>&1; then
  pid=$(cat "$state/dqnd.lock" 2>/dev/null || true)
  echo "run.sh: a dqnd already answers on $url${pid:+ (pid $pid)}: nothing started."
  echo "  stop it (kill ${pid:-PID}), or run the demo against it: $dqnctl --url $url demo"
  exit 1
fi
log=$(mktemp "${TMPDIR:-/tmp}/dqnd-run.XXXXXX")
"$dqnd" --log-file "$log" &
pid=$!
name=""
cleanup() {
  if [ -n "$name" ] && [ $keep = 0 ] && "$dqnctl" --url "$url" --timeout 5000 destroy "$name" >/dev/null 2>&1; then
    echo "run.sh: demo trainer '$name' destroyed (its files are in $state/.retired/; --keep keeps it loaded)"
  fi
  kill -TERM $pid 2>/dev/null && wait $pid 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT
for _ in $(seq 100); do
  "$dqnctl" --url "$url" --timeout 1000 health >/dev/null 2>&1 && break
  if ! kill -0 $pid 2>/dev/null; then
    echo "run.sh: dqnd did not start:"; cat "$log"; exit 1
  fi
  sleep 0.1
done
echo "dqnd (pid $pid) on $url, state in $state, log in $log"
"$dqnctl" --url "$url" info
# the demo's trainer: the user's --name, else a fresh one named for this run
has_name=0
for a in "${args[@]+"${args[@]}"}"; do [ "$a" = --name ] && has_name=1; done
if [ $has_name = 0 ]; then
  args+=(--name "demo-run-$$")
fi
made=""
for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[$i]}" = --name ] && made=${args[$((i + 1))]:-}; done
# destroyed at the end only if this run made it (the demo refuses a name that exists)
"$dqnctl" --url "$url" --timeout 5000 stats "$made" >/dev/null 2>&1 || name=$made
"$dqnctl" --url "$url" demo "${args[@]}"
