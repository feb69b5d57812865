package testenv

import (
	"testing"
	"time"
)

// NATSCLIVersion is the github.com/nats-io/natscli version whose `nats` command the tests drive, as the
// README tells users to.
const NATSCLIVersion = "v0.5.1"

// natsCLIBuildTimeout bounds a cold `go install` of the nats CLI (about a minute on 2 quiet cores).
const natsCLIBuildTimeout = 15 * time.Minute

// NATSCLI returns the path of the cached `nats` command, building it first if needed. A failed build
// fails the test: the README's steps are tested with the real CLI, never skipped.
func NATSCLI(t testing.TB) string {
	t.Helper()
	bin, err := EnsureNATSCLI(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// EnsureNATSCLI returns the path of the cached `nats` command at NATSCLIVersion, installing it with
// `go install` from the Go module proxy first if needed. A file lock makes parallel test packages wait
// for one build. scripts/test.sh runs it (internal/testenv/cmd/natscli-build) before the tests.
func EnsureNATSCLI(logf func(format string, args ...any)) (string, error) {
	return goTool{what: "the nats CLI", pkg: "github.com/nats-io/natscli/nats", version: NATSCLIVersion, cache: "natscli",
		file: "nats", timeout: natsCLIBuildTimeout}.ensure(logf)
}
