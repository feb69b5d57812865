// Package bench measures mediaworker against the raw tools it is built on (libvips in-process,
// ffmpeg, clamd) and against a naive script, as issue 5 asks. bench/run.sh (make bench) builds the
// worker, runs the orchestration benchmark in this package (go test -bench) and then
// bench/cmd/mwbench, which generates a cached corpus, runs every baseline and the worker in the same
// run and writes bench/RESULTS.md. bench/cmd/mwab compares two worker binaries job by job on the
// same files (a paired A/B, for a change smaller than a shared machine's noise).
//
// This package holds what the driver and the benchmarks share: a testing.TB for using
// internal/testenv outside `go test` (Env), a mediaworker subprocess with its RSS readings (Worker),
// a NATS client that uploads, publishes and awaits responses (Client), a logging wrapper around
// ffmpeg and ffprobe that records the worker's exact tool invocations (ToolLog), and statistics.
package bench
