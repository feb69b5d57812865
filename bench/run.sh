#!/usr/bin/env bash
# The benchmark of issue 5 (`make bench`): builds the worker, runs the orchestration benchmark
# (go test -bench in bench/), then bench/cmd/mwbench, which makes (or reuses) the corpus, starts clamd,
# runs every baseline and the worker in the same run and writes bench/RESULTS.md.
#
# Usage: bash bench/run.sh [mwbench flags]
#   -quick          fewer jobs and repetitions (a smoke run, about a third of the time)
#   -runs N         repetitions of each timed measurement (default 3)
#   -leak-n N       jobs in the RSS-over-many-jobs run with S3 storage (default 10000, as the issue asks;
#                   the run with the embedded object store does N/2)
#   -large-mib N    size of the large video input (default 477: under the worker's 500 MiB cap)
#   -phases LIST    startup,images,videos,scan,memory,nats-writes,orchestration,orchestration-prelane
#                   (default: all; orchestration-prelane needs the git history: it builds 4423aa4); also,
#                   alone: image-throughput (the images' throughput comparison) and leak (the
#                   RSS-over-many-jobs part of images) and video-compare (the videos' worker vs bare
#                   ffmpeg comparison, without the large input)
#   -merge          with -phases: rewrite only those phases' rows, sections and commands in the
#                   existing bench/RESULTS.md, keeping the rest of the full run (marked as a partial run)
#   -clips LIST     keep only these clips of the corpus (e.g. 1080p-h264.mp4,720p-h264.mp4)
# The scan phase also generates a realistic ClamAV signature set (about 490,000 signatures, cached
# beside the corpus) and starts a second clamd with it; CI never loads it.
# The corpus is cached in ${MW_CACHE_DIR:-~/.cache/mediaworker}/bench (about 1.2 GB; the first run
# spends a few minutes making it). Scratch space: bench/out/ (git-ignored), emptied at every run.
# Needs ffmpeg, ffprobe, vips, clamd, clamdscan and prlimit: scripts/install-deps.sh installs them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out="$root/bench/out"
mkdir -p "$out"

benchtime=2000x
count=3
for a in "$@"; do
  if [ "$a" = "-quick" ] || [ "$a" = "--quick" ]; then
    benchtime=1000x
    count=1
  fi
done

echo "bench: building bin → $out" >&2
go build -o "$out/mediaworker" ./cmd/mediaworker
go build -o "$out/mwbench" ./bench/cmd/mwbench

orch=(go test ./bench -run '^$' -bench BenchmarkNoopPipeline -benchmem -benchtime "$benchtime" -count "$count" -timeout 15m)
echo "bench: ${orch[*]}" >&2
"${orch[@]}" 2>&1 | tee "$out/orchestration.txt" >&2

exec "$out/mwbench" -bin "$out/mediaworker" -work "$out/work" \
  -orch "$out/orchestration.txt" -orch-cmd "${orch[*]}" -out "$root/bench/RESULTS.md" "$@"
