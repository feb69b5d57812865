// Package testenv is the test harness: it starts the real parts the tests need (an embedded JetStream
// server, MinIO built from the Go module proxy, clamd with the dev signatures) on loopback and makes real
// media with ffmpeg and libvips. It is imported by tests only.
package testenv

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Eventually polls fn every 25 ms until it returns nil or timeout passes, then fails the test with the
// last error. Tests use it instead of sleeping.
func Eventually(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = fn(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// RequireBinary returns the path of a program the tests need. A missing program fails the test: CI
// installs everything, and a skipped test would hide a broken set-up.
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: run scripts/install-deps.sh (as root) first", name)
	}
	return p
}

// StartNATS runs an in-process JetStream server on a random loopback port with its store in a temp dir,
// and shuts it down when the test ends.
func StartNATS(t testing.TB) *server.Server {
	t.Helper()
	return StartNATSWith(t, &server.Options{JetStream: true, StoreDir: t.TempDir()})
}

// StartNATSWith is StartNATS with the server's options: users, permissions, or no JetStream at all.
// It listens on a free loopback port, without logs or signal handlers, whatever opts say.
func StartNATSWith(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("creating nats server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not become ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect opens a client connection to s that is closed when the test ends.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Name(fmt.Sprintf("test:%s", t.Name())))
	if err != nil {
		t.Fatalf("connecting to nats: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}
