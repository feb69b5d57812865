package jetstream_test

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// BenchmarkEmbeddedPublishAck measures what the embedded server's fsync policy costs a publisher:
// one synchronous JetStream publish (until its ack) of a request-sized message and of an object-store
// chunk, with nats-server's default (fsync every 2 min), a 1 s interval and fsync on every write.
// docs/operations.md quotes its numbers:
//
//	go test -run '^$' -bench EmbeddedPublishAck -benchtime 300x ./jetstream
func BenchmarkEmbeddedPublishAck(b *testing.B) {
	for _, p := range []struct {
		name     string
		interval time.Duration
		always   bool
	}{{"default-2m", 0, false}, {"interval-1s", time.Second, false}, {"always", 0, true}} {
		for _, size := range []struct {
			name string
			n    int
		}{{"request-1KiB", 1 << 10}, {"chunk-128KiB", 128 << 10}} {
			b.Run(p.name+"/"+size.name, func(b *testing.B) {
				cfg := natsjs.EmbeddedConfig{Listen: "127.0.0.1:-1", DataDir: b.TempDir(), SyncInterval: p.interval, SyncAlways: p.always}
				s, err := natsjs.StartEmbedded(cfg, zerolog.Nop())
				if err != nil {
					b.Fatal(err)
				}
				defer func() { s.Shutdown(); s.WaitForShutdown() }()
				nc, err := nats.Connect(s.ClientURL())
				if err != nil {
					b.Fatal(err)
				}
				defer nc.Close()
				js, _ := jetstream.New(nc)
				ctx := context.Background()
				if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench"}}); err != nil {
					b.Fatal(err)
				}
				msg := make([]byte, size.n)
				b.SetBytes(int64(size.n))
				b.ResetTimer()
				for range b.N {
					if _, err := js.Publish(ctx, "bench", msg); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
