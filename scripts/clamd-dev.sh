#!/usr/bin/env bash
# Starts clamd for development with the dev signature database (EICAR only; NOT for production: real
# sites run freshclam) on tcp://127.0.0.1:3310, unless something already answers PING there.
# Usage: scripts/clamd-dev.sh [DATA_DIR]   (default ./data; clamd files go to DATA_DIR/clamav)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=$(mkdir -p "${1:-$root/data}" && cd "${1:-$root/data}" && pwd)
dir="$data/clamav"
port=3310

ping_clamd() {
  # zPING over bash's /dev/tcp; a healthy clamd answers PONG.
  local reply
  { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
  printf 'zPING\0' >&3
  IFS= read -r -d '' -t 2 reply <&3 || true
  exec 3<&- 3>&-
  [ "$reply" = "PONG" ]
}

if ping_clamd; then
  echo "clamd-dev: clamd already answers on 127.0.0.1:$port" >&2
  exit 0
fi

mkdir -p "$dir/db"
cp "$root"/deploy/clamav/dev-signatures/*.ndb "$dir/db/"
{
  cat "$root/deploy/clamav/clamd.conf"
  echo
  echo "# Filled in by scripts/clamd-dev.sh"
  echo "DatabaseDirectory $dir/db"
  echo "PidFile $dir/clamd.pid"
  echo "TemporaryDirectory ${TMPDIR:-/tmp}"
} > "$dir/clamd.conf"

echo "clamd-dev: starting clamd with the dev signatures (log: $dir/clamd.log)" >&2
nohup setsid clamd --config-file="$dir/clamd.conf" >"$dir/clamd.log" 2>&1 </dev/null &
for _ in $(seq 1 120); do
  if ping_clamd; then
    echo "clamd-dev: clamd is up on tcp://127.0.0.1:$port" >&2
    exit 0
  fi
  sleep 0.5
done
echo "clamd-dev: clamd did not answer within 60 s; its log:" >&2
tail -20 "$dir/clamd.log" >&2
exit 1
