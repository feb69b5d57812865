package bench_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkClusterJobRound prices one job's JetStream writes on a three-server cluster with every
// stream, bucket and consumer at three replicas, as a site with many workers runs it (the scale model
// in docs/operations.md). The servers run in this process on loopback, so they share this machine's
// cores with each other and with the load: a floor for what separate machines do, not a ceiling.
//
// Each job makes the writes the worker's common path makes, in its order (bench/RESULTS.md, *NATS
// writes per job*, counts them on a real worker): the API's request into a work queue; triage's pull,
// its lane copy and its ack (the request's removal); the lane's pull, the settled-memory lookup (a
// direct get), the outbox record, the response, the reuse record and the lane's ack. Every write
// waits, so a job's time is the sum of the round trips (the worker does not wait for the reuse record).
//
//   - latency: one job at a time: the time per job.
//   - throughput: 32 jobs at a time (many workers' slots): jobs/s, and the replicated entries per
//     second that makes (entries/s: the writes above, two per pull request, one per delivery and per
//     ack and one per work-queue removal, as RESULTS.md counts them).
//
// Sync policies: nats-server's default for a cluster (fsync every 2 min; the other replicas are the
// copies) and sync_interval: always.
//
// Run: go test ./bench -run '^$' -bench BenchmarkClusterJobRound -benchtime 300x -count 3
func BenchmarkClusterJobRound(b *testing.B) {
	for _, always := range []bool{false, true} {
		policy := "default-2m"
		if always {
			policy = "always"
		}
		for _, mode := range []struct {
			name     string
			parallel int
		}{{"latency", 1}, {"throughput", 32}} {
			b.Run(policy+"/"+mode.name, func(b *testing.B) {
				js := startCluster(b, always)
				w := provisionRound(b, js)
				var next atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, mode.parallel)
				b.ResetTimer()
				start := time.Now()
				for range mode.parallel {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							if err := w.job(i); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				close(errs)
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
				jobsPerSec := float64(b.N) / elapsed.Seconds()
				b.ReportMetric(jobsPerSec, "jobs/s")
				b.ReportMetric(jobsPerSec*roundEntries, "entries/s")
			})
		}
	}
}

// roundEntries are the replicated entries one round makes: stored messages (request, lane copy,
// outbox, response, reuse: 5), work-queue removals (2), deliveries (2), acks (2) and pull requests
// (2, two entries each: 4).
const roundEntries = 5 + 2 + 2 + 2 + 4

type round struct {
	ctx            context.Context
	js             jetstream.JetStream
	triage, lane   jetstream.Consumer
	settled, reuse jetstream.KeyValue
	request        []byte
	response       []byte
	outbox         []byte
	reuseRecord    []byte
}

// provisionRound makes the streams as the worker does (requests a work queue, responses, the two
// buckets), all R3, and the two shared pull consumers.
func provisionRound(b *testing.B, js jetstream.JetStream) *round {
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "APP_MEDIA_REQUESTS", Subjects: []string{"app.media.optimize.request", "app.media.optimize.work.>"},
		Retention: jetstream.WorkQueuePolicy, Replicas: 3, Duplicates: 2 * time.Minute, AllowDirect: true}); err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "APP_MEDIA_RESPONSES", Subjects: []string{"app.media.optimize.response"},
		Replicas: 3, Duplicates: 2 * time.Minute, MaxAge: 7 * 24 * time.Hour, AllowDirect: true}); err != nil {
		b.Fatal(err)
	}
	consumer := func(name, subject string) jetstream.Consumer {
		c, err := js.CreateConsumer(ctx, "APP_MEDIA_REQUESTS", jetstream.ConsumerConfig{Durable: name, FilterSubject: subject,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 1000, Replicas: 3})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	r := &round{ctx: ctx, js: js, triage: consumer("mediaworker", "app.media.optimize.request"),
		lane: consumer("mediaworker-image", "app.media.optimize.work.image")}
	var err error
	if r.settled, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "APP_MEDIA_SETTLED", TTL: 7 * 24 * time.Hour, Replicas: 3}); err != nil {
		b.Fatal(err)
	}
	if r.reuse, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "APP_MEDIA_REUSE", TTL: 7 * 24 * time.Hour, MaxBytes: 64 << 20, Replicas: 3}); err != nil {
		b.Fatal(err)
	}
	// Sizes as RESULTS.md (*NATS writes per job*) measured them on a real worker's image job: a request
	// of about 300 bytes, a response of about 1 KB (three variants and the asset facts), its outbox
	// (the response base64-encoded in JSON, 1.5 KB) and a reuse record of 1 KB.
	r.request = []byte(`{"s3Key":"uploads/2026/11/photo-0001.jpg","s3Bucket":"media","mediaId":"` + strings.Repeat("0", 36) + `","mediaUrl":"https://api.example/v1/media/` + strings.Repeat("0", 36) + `"}`)
	r.response = make([]byte, 1050)
	r.outbox = make([]byte, 1550)
	r.reuseRecord = make([]byte, 1030)
	return r
}

// job is one round; i makes its ids unique.
func (r *round) job(i int64) error {
	ctx := r.ctx
	pub := func(subject string, data []byte, id string) error {
		_, err := r.js.Publish(ctx, subject, data, jetstream.WithMsgID(id))
		return err
	}
	if err := pub("app.media.optimize.request", r.request, fmt.Sprint("req/", i)); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	m, err := r.triage.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		return fmt.Errorf("triage pull: %w", err)
	}
	meta, err := m.Metadata()
	if err != nil {
		return err
	}
	seq := fmt.Sprint(meta.Sequence.Stream)
	msg := nats.NewMsg("app.media.optimize.work.image")
	msg.Data = m.Data()
	msg.Header.Set("Mw-Request-Seq", seq)
	msg.Header.Set("Mw-Published-At", meta.Timestamp.UTC().Format(time.RFC3339Nano))
	if _, err := r.js.PublishMsg(ctx, msg, jetstream.WithMsgID("route/"+seq)); err != nil {
		return fmt.Errorf("lane copy: %w", err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		return fmt.Errorf("triage ack: %w", err)
	}
	l, err := r.lane.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		return fmt.Errorf("lane pull: %w", err)
	}
	lseq := l.Headers().Get("Mw-Request-Seq")
	// The lane's look at the settled memory (a late duplicate?).
	if _, err := r.settled.Get(ctx, lseq); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("settled lookup: %w", err)
	}
	if _, err := r.settled.Put(ctx, lseq, r.outbox); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	if err := pub("app.media.optimize.response", r.response, "resp/"+lseq); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	if _, err := r.reuse.Put(ctx, "sha-"+lseq, r.reuseRecord); err != nil {
		return fmt.Errorf("reuse record: %w", err)
	}
	if err := l.DoubleAck(ctx); err != nil {
		return fmt.Errorf("lane ack: %w", err)
	}
	return nil
}

// startCluster starts three JetStream servers in a cluster on loopback and returns a client of it
// (connected to all three, as a worker of a site is).
func startCluster(b *testing.B, syncAlways bool) jetstream.JetStream {
	b.Helper()
	ports := make([]int, 3)
	for i := range ports {
		ports[i] = testenv.FreePort(b)
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var urls []string
	for i := range 3 {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: b.TempDir(), SyncAlways: syncAlways,
			Cluster: server.ClusterOpts{Name: "mw", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			b.Fatal(err)
		}
		go s.Start()
		b.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		if !s.ReadyForConnections(30 * time.Second) {
			b.Fatalf("server n%d not ready", i)
		}
		urls = append(urls, s.ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	// JetStream is ready once the cluster has a meta leader.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return js
		}
		if time.Now().After(deadline) {
			b.Fatalf("the cluster has no JetStream meta leader after 60 s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
