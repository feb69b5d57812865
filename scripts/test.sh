#!/usr/bin/env bash
# The test command: installs missing prerequisites, checks formatting and vet, runs the pure packages
# with the race detector, then every test against real parts (embedded NATS, clamd, versitygw and MinIO
# that the test harness starts on loopback, ffmpeg and libvips on media the tests generate). versitygw and
# MinIO are built from the Go module proxy on first use and cached under ~/.cache/mediaworker (about 5
# minutes each cold).
# Set MW_TEST_FLAGS for extra `go test` flags (e.g. MW_TEST_FLAGS=-short).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh --test

echo "== gofmt" >&2
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi
echo "== go vet" >&2
go vet ./...

echo "== building MinIO for the tests (cached)" >&2
go run ./internal/testenv/cmd/minio-build
echo "== building versitygw for the tests (cached)" >&2
go run ./internal/testenv/cmd/versitygw-build
echo "== installing the nats CLI for the README's steps (cached)" >&2
go run ./internal/testenv/cmd/natscli-build

echo "== race: pure packages" >&2
go test -race -count=1 ./contracts/... ./slots/... ./pipeline/... ./ingest/...

echo "== all tests" >&2
# shellcheck disable=SC2086
go test -count=1 -timeout 40m ${MW_TEST_FLAGS:-} ./...
