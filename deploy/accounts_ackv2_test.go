package deploy

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATS has announced a second form of JetStream's ack subjects ($JS.ACK.<domain>.<account hash>.<stream>.
// <consumer>.…) beside today's ($JS.ACK.<stream>.<consumer>.…). accounts.conf lets each role ack in both,
// on exactly its own streams: a server that switches forms must not stop every ack (a redelivery storm
// that ends in dead letters), and neither form may reach another role's stream.
func TestAccountsAcceptBothAckSubjectForms(t *testing.T) {
	// The passwords are read from the environment while the file is parsed (not t.Setenv: the cases
	// below run in parallel).
	for _, kv := range roleEnv() {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
		defer os.Unsetenv(k)
	}
	opts, err := server.ProcessConfigFile("nats/accounts.conf")
	if err != nil {
		t.Fatalf("nats/accounts.conf: %v", err)
	}
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not become ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	url := s.ClientURL()

	for _, c := range []struct {
		user, stream, consumer string
	}{
		{"worker", "APP_MEDIA_REQUESTS", "mediaworker-image"},
		{"worker", "APP_MEDIA_ADVISORIES", "mediaworker-advisories"},
		{"api", "APP_MEDIA_RESPONSES", "api"},
		{"ops", "APP_MEDIA_DLQ", "ops"},
	} {
		for form, subject := range map[string]string{
			"v1": "$JS.ACK." + c.stream + "." + c.consumer + ".1.7.7.1700000000000000000.0",
			"v2": "$JS.ACK.hub.ABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGHIJKLMNOPQRSTUV." + c.stream + "." + c.consumer + ".1.7.7.1700000000000000000.0.x1",
		} {
			t.Run(c.user+" "+c.stream+" "+form, func(t *testing.T) {
				t.Parallel()
				allowedPublish(t, url, c.user, subject)
			})
		}
	}
	// Another role's stream, in the new form: still refused.
	t.Run("api on others' streams", func(t *testing.T) {
		t.Parallel()
		deniedPublish(t, url, "api", "$JS.ACK.hub.ACCOUNTHASH.APP_MEDIA_REQUESTS.mediaworker-image.1.7.7.1.0.x1")
		deniedPublish(t, url, "api", "$JS.ACK.hub.ACCOUNTHASH.APP_MEDIA_RESPONSES.other.1.7.7.1.0.x1")
	})
}

// allowedPublish publishes as user and fails if the server answers with a permissions violation within
// two seconds (a violation arrives in milliseconds on loopback).
func allowedPublish(t *testing.T, url, user, subject string) {
	t.Helper()
	errs := make(chan error, 4)
	nc, err := nats.Connect(url, nats.UserInfo(user, rolePasswords[user]),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(subject, nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Errorf("%s acking on %s: %v", user, subject, err)
	case <-time.After(2 * time.Second):
	}
}
