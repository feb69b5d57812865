#!/usr/bin/env bash
# Regenerates the settings table of docs/operations.md from `mediaworker run --help`, so the page lists
# exactly what `run` accepts (deploy/docs_test.go fails when it does not). Run it after changing a flag.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=$(mktemp -d)/mediaworker
go build -o "$bin" ./cmd/mediaworker
table=$(mktemp)
"$bin" run --help | awk '
  /^  --/ { flag = $1; type = (NF > 1 ? $2 : "bool"); if (type == "value") type = "size"; next }
  /^      \[/ { env = $0; sub(/^ +\[/, "", env); sub(/\]$/, "", env); gsub(/, /, "`, `", env)
                gsub(/</, "\\&lt;", desc); gsub(/>/, "\\&gt;", desc)
                printf "| `%s` | `%s` | %s | %s | %s |\n", flag, env, type, def, desc; next }
  /^      / { desc = $0; sub(/^ +/, "", desc); def = ""
              if (match(desc, / \(default [^()]*\)$/)) { def = "`" substr(desc, RSTART + 10, RLENGTH - 11) "`"; desc = substr(desc, 1, RSTART - 1) } }' |
sed -e 's#^\(| `--max-image-jobs` .*| int | \)`[0-9]*`#\1number of CPUs#' \
    -e 's#^\(| `--max-video-jobs` .*| int | \)`[0-9]*`#\11 on ≤ 2 CPUs, else CPUs ÷ 2#' \
    -e 's#`[^`]*/mediaworker`#`$TMPDIR/mediaworker`#' > "$table"
TABLE="$table" python3 - <<'PY'
import os
p='docs/operations.md'
lines=open(p).read().split('\n')
hdr=lines.index('| flag | environment | type | default | meaning |')
start=end=hdr+2
while end < len(lines) and lines[end].startswith('| `--'):
    end+=1
lines[start:end]=open(os.environ['TABLE']).read().rstrip('\n').split('\n')
open(p,'w').write('\n'.join(lines))
PY
rm -f "$table" "$bin"
echo "docs/operations.md: settings table regenerated" >&2
