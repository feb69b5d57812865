package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/objstore/natsobj"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/transcoder"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// BenchmarkNoopPipeline measures what the worker adds around a transform: the real pull loop
// (jetstream.Worker: one pull per free slot, InProgress keep-alive, publish-acked response, double
// ack) and the real pipeline (pipeline.New: scratch dir, Stat and streamed download of a tiny PNG from
// the JetStream object store, content detection, slot, upload of the outputs, cleanup) on an embedded
// JetStream server, with the two CPU-bound parts replaced by fakes that do nothing: a scanner that
// reads the bytes and answers clean and an image transform that writes no variant (variants=0) or three 100-byte
// files that are then uploaded (variants=3). The worker connects in-process, as app.New connects to its
// embedded server; the API's side over TCP. The worker's intake (messages held at once) is what
// app.New gives it, image + video jobs of app.DefaultConfig (3 on 2 cores), and for comparison 16.
//
//   - throughput: b.N requests published at once by a separate client connection (as an API would),
//     timed from the first publish to the last response: jobs/s; also the process's CPU per job
//     (cpu-ms/job: server, worker and client, steadier than the rate on a busy machine) and the
//     messages clients sent the server per job (msgs/job: publishes, pulls, acks and API requests).
//   - latency: one request at a time, publish → response: the per-job overhead a real job pays on top
//     of its transform; reported as p50-ms and p99-ms.
//   - retained (variants=3): live Go heap gained per job after a GC, the memory a long-running worker
//     keeps per finished job (the embedded JetStream's state for the three stored objects).
//
// Run: go test ./bench -run '^$' -bench BenchmarkNoopPipeline -benchmem -benchtime 2000x -count 3
func BenchmarkNoopPipeline(b *testing.B) {
	cases := []struct {
		variants, slots   int
		latency, retained bool
	}{
		{0, defaultSlots(), true, false},
		{0, 16, false, false}, // the same with a deeper intake: does concurrency or CPU limit the rate?
		{3, defaultSlots(), true, true},
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("variants=%d/intake=%d", c.variants, c.slots), func(b *testing.B) {
			h := startNoopWorld(b, c.variants, c.slots)
			b.Run("throughput", func(b *testing.B) {
				b.ReportAllocs()
				in0, cpu0 := h.serverMsgs(b), processCPU(b)
				start := time.Now()
				h.batch(b, b.N)
				el := time.Since(start)
				b.ReportMetric(float64(b.N)/el.Seconds(), "jobs/s")
				// The whole process's CPU (server, worker and client) per job: steadier than the rate on
				// a machine that is busy with other work.
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/job")
				// Every message a client sent the server (publishes, pulls, acks, API requests) per job:
				// the round trips the orchestration costs, whatever the machine's speed.
				b.ReportMetric(float64(h.serverMsgs(b)-in0)/float64(b.N), "msgs/job")
			})
			if c.retained {
				// Live Go heap (after GC) gained per job: what the process keeps for every finished job,
				// mostly the embedded JetStream's state for the objects it now stores.
				b.Run("retained", func(b *testing.B) {
					var m0, m1 runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&m0)
					h.batch(b, b.N)
					runtime.GC()
					runtime.ReadMemStats(&m1)
					b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/float64(b.N), "retained-B/job")
				})
			}
			if !c.latency {
				return
			}
			b.Run("latency", func(b *testing.B) {
				b.ReportAllocs()
				lat := make([]float64, 0, b.N)
				for range b.N {
					start := time.Now()
					h.batch(b, 1)
					lat = append(lat, float64(time.Since(start))/float64(time.Millisecond))
				}
				b.ReportMetric(bench.Percentile(lat, 50), "p50-ms")
				b.ReportMetric(bench.Percentile(lat, 99), "p99-ms")
			})
		})
	}
}

// noopWorld is an embedded JetStream server with the streams, a worker pulling from it and an API-side
// connection that publishes requests and collects responses.
type noopWorld struct {
	srv  *server.Server
	js   jetstream.JetStream // the API's
	subj contracts.Subjects

	mu      sync.Mutex
	pending map[string]chan struct{}
	bad     []string // responses that were not a success
}

func startNoopWorld(b *testing.B, variants, slots int) *noopWorld {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	srv := testenv.StartNATS(b)

	// The worker's side: its own connection, made as app.New makes it on the embedded default
	// (in-process: no socket between the worker and its server).
	wnc, wjs, err := natsjs.Connect(natsjs.ConnectConfig{Name: "bench worker", Embedded: srv})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(wnc.Close)
	scfg := natsjs.DefaultConfig()
	if err := natsjs.Provision(ctx, wjs, scfg); err != nil {
		b.Fatal(err)
	}
	store, err := natsobj.New(wjs, natsobj.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	if err := store.EnsureBucket(ctx, "media"); err != nil {
		b.Fatal(err)
	}
	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, image.NewRGBA(image.Rect(0, 0, 1, 1))); err != nil {
		b.Fatal(err)
	}
	if err := store.Put(ctx, "media", "u/tiny.png", bytes.NewReader(pngBuf.Bytes()), int64(pngBuf.Len()), "image/png"); err != nil {
		b.Fatal(err)
	}
	pcfg := pipeline.DefaultConfig()
	pcfg.TmpDir = b.TempDir()
	pcfg.MinFreeBytes = 0
	pipe, err := pipeline.New(pcfg, pipeline.Deps{
		Store: store, Scanner: cleanScanner{}, Images: noopImages{variants: variants}, Videos: noopVideos{},
	})
	if err != nil {
		b.Fatal(err)
	}
	wcfg := natsjs.DefaultWorkerConfig()
	wcfg.Words = pipeline.Words
	wcfg.Lanes = map[pipeline.MediaKind]int{pipeline.Image: slots} // the noop world's uploads are images
	w, err := natsjs.NewWorker(wjs, scfg, wcfg, pipe, nil, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.Error("worker did not stop within 30s")
		}
	})

	// The API's side.
	anc := testenv.Connect(b, srv)
	h := &noopWorld{srv: srv, subj: scfg.Subjects(), pending: map[string]chan struct{}{}}
	if h.js, err = jetstream.New(anc, jetstream.WithPublishAsyncMaxPending(1024)); err != nil {
		b.Fatal(err)
	}
	sub, err := anc.Subscribe(h.subj.Response, func(m *nats.Msg) {
		var r contracts.Response
		err := json.Unmarshal(m.Data, &r)
		h.mu.Lock()
		if err != nil || !r.Success {
			h.bad = append(h.bad, string(m.Data))
		}
		ch := h.pending[r.MediaID]
		delete(h.pending, r.MediaID)
		h.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := anc.Flush(); err != nil {
		b.Fatal(err)
	}
	h.batch(b, 20) // warm up: streams, consumer, object-store handles
	return h
}

// defaultSlots is what app.DefaultConfig gives this machine: image jobs = cores, video jobs = 1 on up
// to 2 cores, else cores/2. (Not imported from app, whose DefaultConfig also wires HTTP and TMPDIR.)
func defaultSlots() int {
	cores := runtime.NumCPU()
	video := 1
	if cores > 2 {
		video = cores / 2
	}
	return cores + video
}

// serverMsgs is how many messages clients have sent the server so far.
func (h *noopWorld) serverMsgs(b *testing.B) int64 {
	v, err := h.srv.Varz(nil)
	if err != nil {
		b.Fatal(err)
	}
	return v.InMsgs
}

// processCPU is the CPU time (user + system) this process has used so far.
func processCPU(b *testing.B) time.Duration {
	d, err := bench.ProcessCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// batch publishes n requests asynchronously and waits for all n responses.
func (h *noopWorld) batch(b *testing.B, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute+time.Duration(n)*10*time.Millisecond)
	defer cancel()
	waits := make([]chan struct{}, n)
	for i := range n {
		id := uuid.NewString()
		ch := make(chan struct{})
		waits[i] = ch
		h.mu.Lock()
		h.pending[id] = ch
		h.mu.Unlock()
		data, _ := json.Marshal(contracts.Request{S3Key: "u/tiny.png", S3Bucket: "media", MediaID: id,
			MediaURL: "https://api.example/v1/media/" + id})
		if _, err := h.js.PublishMsgAsync(&nats.Msg{Subject: h.subj.Request, Data: data}, jetstream.WithMsgID(id)); err != nil {
			b.Fatalf("publishing: %v", err)
		}
	}
	select {
	case <-h.js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("publishes not acknowledged in time")
	}
	for _, ch := range waits {
		select {
		case <-ch:
		case <-ctx.Done():
			b.Fatalf("responses missing after %s", time.Minute)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.bad) > 0 {
		b.Fatalf("%d jobs did not succeed, e.g. %s", len(h.bad), h.bad[0])
	}
}

// cleanScanner answers clean without clamd. It still reads every byte it is given: the pipeline may
// feed it the download as it streams (and would block on a scanner that does not read).
type cleanScanner struct{}

func (cleanScanner) Scan(_ context.Context, r io.Reader, size int64) (scanner.Verdict, error) {
	n, err := io.Copy(io.Discard, r)
	if err == nil && n != size {
		err = fmt.Errorf("scanner read %d of %d bytes", n, size)
	}
	return scanner.Verdict{}, err
}

func (c cleanScanner) ScanFile(ctx context.Context, path string) (scanner.Verdict, error) {
	f, err := os.Open(path)
	if err != nil {
		return scanner.Verdict{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return scanner.Verdict{}, err
	}
	return c.Scan(ctx, f, st.Size())
}

type noopImages struct{ variants int }

// TransformRecipe writes n.variants files of 100 bytes, whatever the recipe (pipeline.ImageTransformer).
func (n noopImages) TransformRecipe(ctx context.Context, src, outDir string, _ []transcoder.ImageVariantSpec) (transcoder.ImageResult, error) {
	return n.Transform(ctx, src, outDir)
}

func (n noopImages) Transform(_ context.Context, _, outDir string) (transcoder.ImageResult, error) {
	res := transcoder.ImageResult{Width: 1, Height: 1, Format: "png"}
	for _, q := range []string{"high", "medium", "low"}[:n.variants] {
		p := filepath.Join(outDir, q+".webp")
		if err := os.WriteFile(p, make([]byte, 100), 0o644); err != nil {
			return res, err
		}
		res.Variants = append(res.Variants, transcoder.ImageVariant{Quality: q, Path: p, Width: 1, Height: 1, Size: 100})
	}
	return res, nil
}

type noopVideos struct{}

func (noopVideos) Probe(context.Context, string) (*transcoder.VideoProbe, error) {
	return nil, fmt.Errorf("no videos in this benchmark")
}

func (noopVideos) TransformProbed(context.Context, *transcoder.VideoProbe, string) (transcoder.VideoResult, error) {
	return transcoder.VideoResult{}, fmt.Errorf("no videos in this benchmark")
}
