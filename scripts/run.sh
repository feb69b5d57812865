#!/usr/bin/env bash
# The one-command start: install missing prerequisites (ffmpeg, libvips, clamd), start clamd with the dev
# signatures, build mediaworker and run it on its embedded default (NATS JetStream on 127.0.0.1:4222,
# JetStream object store, HTTP on 127.0.0.1:8080). Extra arguments go to `mediaworker run`.
#   scripts/run.sh config [ARGS]   prints the settings that run would use with ARGS (`mediaworker config`
#                                  with this script's data dir and clamd address), starts nothing
#   scripts/run.sh stop-clamd      stops the dev clamd this script started (it outlives the worker, so
#                                  the next start does not wait for it to load its database)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

build() {
  mkdir -p bin
  echo "run: building bin/mediaworker" >&2
  go build -o bin/mediaworker ./cmd/mediaworker
}

# The address clamd-dev.sh wrote for its clamd (the unix socket when it started clamd itself).
# MW_CLAMD_ADDR or a --clamd-addr among the arguments (which come later, so they win) override it.
clamd_args() {
  clamd=()
  if [ -z "${MW_CLAMD_ADDR:-}" ] && [ -s "$root/data/clamav/clamd.addr" ]; then
    clamd=(--clamd-addr "$(cat "$root/data/clamav/clamd.addr")")
  fi
}

case "${1:-}" in
config)
  shift
  build
  clamd_args
  exec bin/mediaworker config --data-dir "$root/data" "${clamd[@]}" "$@"
  ;;
stop-clamd)
  pidfile="$root/data/clamav/clamd.pid"
  pid=$(cat "$pidfile" 2>/dev/null || true) # read once: clamd removes its pid file as it exits
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    echo "run: stopped the dev clamd (pid $pid)" >&2
  else
    echo "run: no dev clamd of this script is running ($pidfile)" >&2
  fi
  exit 0
  ;;
esac

scripts/install-deps.sh
scripts/clamd-dev.sh "$root/data"
build
clamd_args
exec bin/mediaworker run --data-dir "$root/data" "${clamd[@]}" "$@"
