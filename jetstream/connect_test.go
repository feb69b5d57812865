package jetstream_test

import (
	"strings"
	"testing"

	natsjs "github.com/mediaworker/mediaworker/jetstream"
)

// A refused or failed connection names the server, never the password in its URL.
func TestConnectErrorRedactsThePassword(t *testing.T) {
	_, _, err := natsjs.Connect(natsjs.ConnectConfig{URL: "nats://worker:hunter2@127.0.0.1:1,nats://127.0.0.1:2", Name: "test"})
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("error %q: want the server named and the password masked", err)
	}
}
