// Package faults is the fault-injection suite of "never lose, never duplicate": it runs the mediaworker
// binary (built from this checkout by TestMain) as real processes against real NATS (in-process, a
// separate nats-server process, or a 3-node cluster), clamd and an S3 server (versitygw) on loopback, breaks them on
// purpose (SIGKILL, SIGTERM, restarts, outages, lost replies, poison payloads, saturated pools) and
// checks what the API sees: every request ends in exactly one outcome.
//
// What the API sees is read from the responses and dead-letter streams (where Nats-Msg-Id removes a
// republished duplicate); what a plain core-NATS subscriber saw is counted too and logged.
//
// `go test -short ./faults/` trims the accounting test (60 requests instead of 500). On failure each
// worker's /health, goroutine dump (SIGQUIT) and log tail are printed; FAULTS_LOGS=1 prints the logs of
// passing tests too, and FAULTS_KEEP_LOGS=DIR keeps whole worker logs there.
//
// The package has tests only.
package faults
