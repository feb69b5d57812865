package natsobj_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/natsobj"
)

// A JetStream API request whose reply never comes (the server took it and shut down, or it went out
// in the reconnect buffer to a server that dropped it) fails every Store call within Timeout, however
// far away the caller's deadline is: a job's context may allow half an hour, and an upload once waited
// that long for the bucket lookup of a Put sent as nats-server restarted.
func TestLostRepliesFailEveryCallWithinTimeout(t *testing.T) {
	// A server without JetStream, where a responder takes every JetStream API request and never
	// answers: every request's reply is lost.
	nc := testenv.Connect(t, testenv.StartNATSWith(t, &server.Options{}))
	if _, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 300 * time.Millisecond
	s := newStore(t, js, natsobj.Config{Timeout: timeout})
	far, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()

	for name, call := range map[string]func() error{
		"Put":          func() error { return s.Put(far, "media", "k", strings.NewReader("v"), 1, "text/plain") },
		"Stat":         func() error { _, err := s.Stat(far, "media", "k"); return err },
		"Get":          func() error { _, err := s.Get(far, "media", "k", io.Discard); return err },
		"ReadHead":     func() error { _, err := objstore.ReadHead(far, s, "media", "k", 16); return err },
		"Delete":       func() error { return s.Delete(far, "media", "k") },
		"Copy":         func() error { return s.Copy(far, "media", "k", "media", "k2") },
		"EnsureBucket": func() error { return s.EnsureBucket(far, "media") },
		"Ping":         func() error { return s.Ping(far) },
	} {
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- call() }()
		select {
		case err := <-done:
			took := time.Since(start)
			if err == nil {
				t.Errorf("%s succeeded with every reply lost", name)
			}
			if took > 4*timeout {
				t.Errorf("%s took %s with every reply lost, want about Timeout (%s)", name, took.Round(time.Millisecond), timeout)
			}
		case <-time.After(20 * timeout):
			t.Errorf("%s still waiting %s after its request: bounded by the caller's hour, not Timeout (%s)", name, 20*timeout, timeout)
		}
	}
}
