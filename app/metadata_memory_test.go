package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/nats-io/nats.go"
)

// maxBombRise is how much the worker's peak resident set may grow while it takes a 250 MB upload
// that is refused for its metadata: what any 250 MB upload costs on the embedded default (the
// embedded server storing and serving its chunks, the download; measured ~58 MiB, as for 250 MB of
// random bytes), with room for a busy machine, and far below the 250 MB a decoder's header read
// holds (measured +333 MiB before the metadata check moved ahead of the memory estimate).
const maxBombRise = 150 << 20

// TestMetadataBombWorkerMemory: issue 31 item 7. A 640×480 JPEG carrying 250 MB of APP1 (EXIF) on
// the embedded default (the worker's own NATS server and JetStream object store, clamd over TCP,
// the default --max-memory and --max-input-bytes) is refused for its metadata, and the worker's
// peak memory does not grow by its size. The worker runs in a process of its own (see
// TestHostileWorkerProcess) so that its VmHWM is its alone. About 15 s, most of it moving the
// 250 MB through NATS and clamd.
func TestMetadataBombWorkerMemory(t *testing.T) {
	clamd := testenv.StartClamd(t)
	listen := testenv.FreeAddr(t)
	wp := startWorkerProcess(t, workerSettings{NATSListen: listen, DataDir: t.TempDir(), ClamdAddr: clamd.Addr, TmpDir: t.TempDir()})

	cfg := app.DefaultConfig()
	cfg.Storage = app.StorageNATS
	w := &world{t: t, cfg: cfg, subj: contracts.SubjectsFor(cfg.Streams.App), bucket: "media",
		responses: map[string][]contracts.Response{}, viruses: map[string][]contracts.VirusEvent{}}
	nc, err := nats.Connect("nats://"+listen, nats.Name("test:"+t.Name()))
	if err != nil {
		t.Fatalf("connecting to the worker's embedded server: %v", err)
	}
	t.Cleanup(nc.Close)
	w.observeConn(nc) // every answer is validated against the response schema as it arrives

	// A photo first, so that what the worker sets up once (libvips, its caches) is in the baseline.
	media := t.TempDir()
	if r := w.await(w.request(w.upload(testenv.MakeJPEG(t, media, 640, 480), "warm/p.jpg")), time.Minute); !r.Success {
		t.Fatalf("warm-up job failed: %+v", r)
	}
	var before, after int64
	wp.command(t, "peak", &before)

	bomb := w.request(w.upload(testenv.MakeJPEGWithSegments(t, media, "bomb.jpg", 0xE1, 4000, 65533), "u/bomb.jpg"))
	r := w.await(bomb, 2*time.Minute)
	const want = "transforming: image carries 250 MiB of metadata (EXIF, XMP, colour profiles, comments); at most 16 MiB is accepted: remove the metadata and upload it again"
	if r.Success || r.Error != want {
		t.Errorf("got success=%v error %q, want %q", r.Success, r.Error, want)
	}
	wp.command(t, "peak", &after)
	rise := (after - before) << 10
	t.Logf("worker VmHWM %d MiB before the bomb, %d MiB after (+%d MiB; limit +%d MiB)", before>>10, after>>10, rise>>20, maxBombRise>>20)
	if rise > maxBombRise {
		msg := fmt.Sprintf("the worker's peak memory rose by %d MiB taking a 250 MB-EXIF JPEG, want at most %d MiB", rise>>20, maxBombRise>>20)
		if raceEnabled() {
			t.Logf("%s (not judged: the race detector multiplies memory use)", msg)
		} else {
			t.Error(msg)
		}
	}
}
