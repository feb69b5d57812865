package faults

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/nats-io/nats.go/jetstream"
)

// streams are the default stream names and subjects the worker provisions (--app app).
var streams = natsjs.DefaultConfig()

const bucket = "media"

// ---------------------------------------------------------------------------------------------------
// Uploads and requests.

// client is the API side: it uploads media and publishes requests.
type client struct {
	t     *testing.T
	js    jetstream.JetStream
	store objstore.Store
}

// newClient opens the same store the workers use: the JetStream object store of the NATS at urls, or
// the S3 server.
func newClient(t *testing.T, l *ledger, m *testenv.VersityGW, replicas int) *client {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.Streams.Replicas = replicas
	if m != nil {
		cfg.Storage = app.StorageS3
		cfg.S3.Endpoint, cfg.S3.AccessKey, cfg.S3.SecretKey = m.Endpoint, m.AccessKey, m.SecretKey
	}
	store, err := app.OpenStore(context.Background(), cfg, l.js)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.EnsureBucket(ctx, bucket); err != nil {
		t.Fatalf("creating bucket: %v", err)
	}
	return &client{t: t, js: l.js, store: store}
}

// upload stores path under key.
func (c *client) upload(path, key string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := objstore.UploadFile(ctx, c.store, bucket, key, path, "application/octet-stream"); err != nil {
		c.t.Fatalf("uploading %s: %v", key, err)
	}
}

// submit uploads path under key, publishes a request for it and returns the mediaId.
func (c *client) submit(path, key string) string {
	c.t.Helper()
	c.upload(path, key)
	return c.request(key)
}

func (c *client) request(key string) string {
	c.t.Helper()
	req := testenv.NewRequest(bucket, key)
	testenv.PublishRequest(c.t, c.js, streams.Subjects().Request, req, jetstream.WithExpectStream(streams.RequestsStream()))
	return req.MediaID
}

// publish publishes a raw request payload with a Nats-Msg-Id and Nats-Expected-Stream, as a careful API
// does (issue 10: such a request must still reach the DLQ when its last delivery dies).
func (c *client) publish(data []byte, msgID string) {
	c.t.Helper()
	testenv.PublishRaw(c.t, c.js, streams.Subjects().Request, data, msgID, jetstream.WithExpectStream(streams.RequestsStream()))
}

func (c *client) exists(key string) bool {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.store.Stat(ctx, bucket, key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		c.t.Fatalf("stat %s: %v", key, err)
	}
	return err == nil
}

// ---------------------------------------------------------------------------------------------------
// Small things.

// writeFile writes b to dir/name and returns the path.
func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// window lets time pass during a fault while checking that nothing that must not happen does.
func window(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := check(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// responsesOf returns the responses of id in the stream, in order.
