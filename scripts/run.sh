#!/usr/bin/env bash
# The one-command start: install missing prerequisites (ffmpeg, libvips, clamd), start clamd with the dev
# signatures, build mediaworker and run it on its embedded default (NATS JetStream on 127.0.0.1:4222,
# JetStream object store, HTTP on 127.0.0.1:8080). Extra arguments go to `mediaworker run`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
scripts/clamd-dev.sh "$root/data"
mkdir -p bin
echo "run: building bin/mediaworker" >&2
go build -o bin/mediaworker ./cmd/mediaworker
# clamd-dev.sh wrote the address its clamd answers on (the unix socket when it started clamd itself).
# MW_CLAMD_ADDR or a --clamd-addr among the arguments (which come later, so they win) override it.
clamd=()
if [ -z "${MW_CLAMD_ADDR:-}" ] && [ -s "$root/data/clamav/clamd.addr" ]; then
  clamd=(--clamd-addr "$(cat "$root/data/clamav/clamd.addr")")
fi
exec bin/mediaworker run --data-dir "$root/data" "${clamd[@]}" "$@"
