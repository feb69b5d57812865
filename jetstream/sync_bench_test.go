package jetstream_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// What the embedded server's fsync policy costs, with nats-server's default (fsync every 2 min), a 1 s
// interval and fsync on every write (--nats-sync-always, the default). Each policy after the first
// also reports its time per operation as a multiple of the default's (x-default). docs/operations.md
// quotes the numbers:
//
//	go test -run '^$' -bench 'Embedded(PublishAck|JobRound)' -benchtime 300x ./jetstream
//
// The sync policy decides what a power cut loses, not what a process crash does: a killed process's
// writes are in the page cache already. Nor does it order a consumer's state against its stream's
// messages (rescue.go says why a crash can strand a message whatever the policy).
var syncPolicies = []struct {
	name     string
	interval time.Duration
	always   bool
}{{"default-2m", 0, false}, {"interval-1s", time.Second, false}, {"always", 0, true}}

// syncBaseline keeps the default policy's time per operation, by benchmark, for the ratios.
var syncBaseline = struct {
	sync.Mutex
	ns map[string]float64
}{ns: map[string]float64{}}

// reportRatio records the default's time per operation for name, or reports another policy's as a
// multiple of it.
func reportRatio(b *testing.B, policy, name string) {
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	syncBaseline.Lock()
	defer syncBaseline.Unlock()
	if policy == syncPolicies[0].name {
		syncBaseline.ns[name] = ns
		return
	}
	if base := syncBaseline.ns[name]; base > 0 {
		b.ReportMetric(ns/base, "x-default")
	}
}

// benchServer starts an embedded server with a sync policy and connects to it.
func benchServer(b *testing.B, interval time.Duration, always bool) jetstream.JetStream {
	b.Helper()
	cfg := natsjs.EmbeddedConfig{Listen: "127.0.0.1:-1", DataDir: b.TempDir(), SyncInterval: interval, SyncAlways: always}
	s, err := natsjs.StartEmbedded(cfg, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return js
}

// BenchmarkEmbeddedPublishAck: one synchronous JetStream publish (until its ack) of a request-sized
// message and of an object-store chunk.
func BenchmarkEmbeddedPublishAck(b *testing.B) {
	for _, p := range syncPolicies {
		for _, size := range []struct {
			name string
			n    int
		}{{"request-1KiB", 1 << 10}, {"chunk-128KiB", 128 << 10}} {
			b.Run(p.name+"/"+size.name, func(b *testing.B) {
				js := benchServer(b, p.interval, p.always)
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
				b.StopTimer()
				reportRatio(b, p.name, "publish/"+size.name)
			})
		}
	}
}

// BenchmarkEmbeddedJobRound: the JetStream writes one job makes, one after the other as a job does:
// the API's request into a work queue, triage's pull, its lane copy and its ack (the request's
// removal), the lane's pull, the outbox record, the response and the lane's ack. It prices the sync
// policy per job rather than per write.
func BenchmarkEmbeddedJobRound(b *testing.B) {
	for _, p := range syncPolicies {
		b.Run(p.name, func(b *testing.B) {
			js := benchServer(b, p.interval, p.always)
			ctx := context.Background()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "REQ", Subjects: []string{"req", "work"},
				Retention: jetstream.WorkQueuePolicy}); err != nil {
				b.Fatal(err)
			}
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RESP", Subjects: []string{"resp"}}); err != nil {
				b.Fatal(err)
			}
			consumer := func(name, subject string) jetstream.Consumer {
				c, err := js.CreateConsumer(ctx, "REQ", jetstream.ConsumerConfig{Durable: name, FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy})
				if err != nil {
					b.Fatal(err)
				}
				return c
			}
			triage, lane := consumer("triage", "req"), consumer("lane", "work")
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "SETTLED"})
			if err != nil {
				b.Fatal(err)
			}
			req := make([]byte, 300)
			pull := func(c jetstream.Consumer) jetstream.Msg {
				m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
				if err != nil {
					b.Fatal(err)
				}
				return m
			}
			b.ResetTimer()
			for i := range b.N {
				if _, err := js.Publish(ctx, "req", req, jetstream.WithMsgID(fmt.Sprint("r", i))); err != nil {
					b.Fatal(err)
				}
				m := pull(triage)
				if _, err := js.Publish(ctx, "work", m.Data(), jetstream.WithMsgID(fmt.Sprint("w", i))); err != nil {
					b.Fatal(err)
				}
				if err := m.DoubleAck(ctx); err != nil {
					b.Fatal(err)
				}
				m = pull(lane)
				if _, err := kv.Put(ctx, fmt.Sprint(i), req); err != nil {
					b.Fatal(err)
				}
				if _, err := js.Publish(ctx, "resp", req, jetstream.WithMsgID(fmt.Sprint("a", i))); err != nil {
					b.Fatal(err)
				}
				if err := m.DoubleAck(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportRatio(b, p.name, "job-round")
		})
	}
}
