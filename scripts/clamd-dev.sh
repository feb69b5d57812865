#!/usr/bin/env bash
# Starts clamd for development with the dev signature database (EICAR only; NOT for production: real
# sites run freshclam) on tcp://127.0.0.1:3310 and the unix socket DATA_DIR/clamav/clamd.sock, unless
# something already answers PING on the TCP port. It writes the address the worker should use to
# DATA_DIR/clamav/clamd.addr: the unix socket when it is this script's clamd (the worker then hands
# clamd each finished file, FILDES, which costs clamd about a fifth less than streaming it), else TCP.
# Usage: scripts/clamd-dev.sh [DATA_DIR]   (default ./data; clamd files go to DATA_DIR/clamav)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=$(mkdir -p "${1:-$root/data}" && cd "${1:-$root/data}" && pwd)
dir="$data/clamav"
port=3310
sock="$dir/clamd.sock"
addr_file="$dir/clamd.addr"
# A unix socket path must fit in 108 bytes; a deeper DATA_DIR gets TCP only.
[ "${#sock}" -lt 100 ] || sock=""

ping_clamd() {
  # zPING over bash's /dev/tcp; a healthy clamd answers PONG.
  local reply
  { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
  printf 'zPING\0' >&3
  IFS= read -r -d '' -t 2 reply <&3 || true
  exec 3<&- 3>&-
  [ "$reply" = "PONG" ]
}

# ours: clamd whose pid file this script wrote is alive, so its socket is live too.
ours() { [ -n "$sock" ] && [ -S "$sock" ] && [ -s "$dir/clamd.pid" ] && kill -0 "$(cat "$dir/clamd.pid")" 2>/dev/null; }

if ping_clamd; then
  mkdir -p "$dir"
  if ours; then echo "unix://$sock"; else echo "tcp://127.0.0.1:$port"; fi > "$addr_file"
  echo "clamd-dev: clamd already answers on 127.0.0.1:$port (worker address: $(cat "$addr_file"))" >&2
  exit 0
fi

mkdir -p "$dir/db"
[ -z "$sock" ] || rm -f "$sock" # a stale socket from a killed clamd
cp "$root"/deploy/clamav/dev-signatures/*.ndb "$dir/db/"
{
  cat "$root/deploy/clamav/clamd.conf"
  echo
  echo "# Filled in by scripts/clamd-dev.sh"
  echo "DatabaseDirectory $dir/db"
  echo "PidFile $dir/clamd.pid"
  echo "TemporaryDirectory ${TMPDIR:-/tmp}"
  if [ -n "$sock" ]; then
    echo "LocalSocket $sock"
    echo "LocalSocketMode 600" # the worker runs as the same user; nobody else needs clamd
  fi
} > "$dir/clamd.conf"

echo "clamd-dev: starting clamd with the dev signatures (log: $dir/clamd.log)" >&2
nohup setsid clamd --config-file="$dir/clamd.conf" >"$dir/clamd.log" 2>&1 </dev/null &
for _ in $(seq 1 120); do
  if ping_clamd && { [ -z "$sock" ] || [ -S "$sock" ]; }; then
    if [ -n "$sock" ]; then echo "unix://$sock"; else echo "tcp://127.0.0.1:$port"; fi > "$addr_file"
    echo "clamd-dev: clamd is up on tcp://127.0.0.1:$port${sock:+ and unix://$sock}" >&2
    exit 0
  fi
  sleep 0.5
done
echo "clamd-dev: clamd did not answer within 60 s; its log:" >&2
tail -20 "$dir/clamd.log" >&2
exit 1
