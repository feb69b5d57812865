package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/transcoder"
)

// The video probe that runs beside the scan (probe.go): the order of the two with fakes, then the
// real clamd, ffprobe and ffmpeg on a clean and an infected clip.

// gatedScanner reads every byte like clamd, then holds its verdict until a probe has started: the
// job can only finish if the probe runs while the scan is still pending. The wait is bounded; past
// it the scan fails, naming what did not happen.
type gatedScanner struct {
	verdict scanner.Verdict
	probing <-chan struct{}
}

func (g *gatedScanner) Scan(ctx context.Context, r io.Reader, size int64) (scanner.Verdict, error) {
	if n, err := io.Copy(io.Discard, r); err != nil || n != size {
		return scanner.Verdict{}, &scanner.Error{Kind: scanner.Truncated, Op: "reading", Err: fmt.Errorf("got %d of %d bytes: %v", n, size, err)}
	}
	select {
	case <-g.probing:
		return g.verdict, nil
	case <-time.After(30 * time.Second):
		return scanner.Verdict{}, errors.New("no probe started while the verdict was pending")
	}
}

// recordingVideos counts the probes and transforms a job asks for, around the real transcoder (or,
// with real nil, a probe that describes any file and a transform that writes a stand-in MP4).
type recordingVideos struct {
	real    VideoTransformer
	started chan struct{} // closed when the first probe starts
	once    sync.Once

	mu                         sync.Mutex
	probes, running, transform int
	probed                     *transcoder.VideoProbe // what the last probe returned
	usedProbe                  bool                   // the transform got the probe's own result
}

func newRecordingVideos(real VideoTransformer) *recordingVideos {
	return &recordingVideos{real: real, started: make(chan struct{})}
}

func (r *recordingVideos) Probe(ctx context.Context, path string) (*transcoder.VideoProbe, error) {
	r.mu.Lock()
	r.probes++
	r.running++
	r.mu.Unlock()
	r.once.Do(func() { close(r.started) })
	pr, err := &transcoder.VideoProbe{Info: transcoder.VideoInfo{Duration: 1, Width: 320, Height: 240}}, error(nil)
	if r.real != nil {
		pr, err = r.real.Probe(ctx, path)
	}
	r.mu.Lock()
	r.running--
	r.probed = pr
	r.mu.Unlock()
	return pr, err
}

func (r *recordingVideos) TransformProbed(ctx context.Context, pr *transcoder.VideoProbe, out string) (transcoder.VideoResult, error) {
	r.mu.Lock()
	r.transform++
	r.usedProbe = pr != nil && pr == r.probed
	r.mu.Unlock()
	if r.real != nil {
		return r.real.TransformProbed(ctx, pr, out)
	}
	mp4 := filepath.Join(out, "video.mp4")
	if err := os.WriteFile(mp4, []byte("stand-in mp4"), 0o600); err != nil {
		return transcoder.VideoResult{}, err
	}
	return transcoder.VideoResult{Source: pr.Info, MP4Path: mp4, MP4: pr.Info}, nil
}

func (r *recordingVideos) counts() (probes, running, transforms int, usedProbe bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.probes, r.running, r.transform, r.usedProbe
}

// videoFixture is a fixture whose object is an H.264/AAC MP4 made by ffmpeg, with the given bytes
// appended.
func videoFixture(t *testing.T, tail []byte) *fixture {
	t.Helper()
	f := newFixture(t)
	clip := testenv.MakeVideo(t, t.TempDir(), "clip.mp4", testenv.VideoOpts{Seconds: 2, ACodec: "aac", Container: "mp4", FastStart: true})
	data, err := os.ReadFile(clip)
	if err != nil {
		t.Fatal(err)
	}
	f.req.S3Key = "u/clip.mp4"
	delete(f.store.objs, "media/u/p.jpg")
	f.store.objs["media/u/clip.mp4"] = append(data, tail...)
	f.cfg.MaxInputBytes = 64 << 20
	return f
}

// process runs the fixture's request through a pipeline with scan and videos, and checks what every
// job must leave behind: no scratch files, no probe still running, a response the schema accepts.
func (f *fixture) process(t *testing.T, scan Scanner, videos *recordingVideos) Outcome {
	t.Helper()
	p, err := New(f.cfg, Deps{Store: f.store, Scanner: scan, Images: f.images, Videos: videos})
	if err != nil {
		t.Fatal(err)
	}
	out := p.Process(context.Background(), f.req, Video)
	if entries, _ := os.ReadDir(f.cfg.TmpDir); len(entries) != 0 {
		t.Errorf("scratch dir not cleaned: %d entries", len(entries))
	}
	if _, running, _, _ := videos.counts(); running != 0 {
		t.Errorf("%d probes still running after the job ended", running)
	}
	if err := contracts.Validate(contracts.SchemaResponse, out.Response); err != nil {
		t.Errorf("outcome's response fails the schema: %v", err)
	}
	return out
}

func TestVideoProbeRunsBesideTheScan(t *testing.T) {
	f := videoFixture(t, nil)
	videos := newRecordingVideos(nil)
	out := f.process(t, &gatedScanner{probing: videos.started}, videos)
	if out.Kind != Success {
		t.Fatalf("kind %s (%v): the verdict waited for a probe that never started during the scan", out.Kind, out.Err)
	}
	if probes, _, transforms, used := videos.counts(); probes != 1 || transforms != 1 || !used {
		t.Fatalf("%d probes, %d transforms, transform got the probe's result: %t; want one of each, the probe's result reused", probes, transforms, used)
	}
}

func TestInfectedVideoProbedBesideTheScanIsNeverTransformed(t *testing.T) {
	f := videoFixture(t, nil)
	videos := newRecordingVideos(nil)
	out := f.process(t, &gatedScanner{probing: videos.started, verdict: scanner.Verdict{Infected: true, Signature: "Eicar-Test"}}, videos)
	if out.Kind != Infected || out.Virus == nil || out.Response.Error != "virus detected: Eicar-Test" {
		t.Fatalf("%+v", out)
	}
	if probes, _, transforms, _ := videos.counts(); probes != 1 || transforms != 0 {
		t.Fatalf("%d probes, %d transforms; want the one probe beside the scan and no transform", probes, transforms)
	}
	if _, ok := f.store.objs["media/u/clip.mp4"]; ok {
		t.Error("infected object still in place")
	}
}

// realVideoParts is clamd with the dev signatures, reached over TCP (INSTREAM: the scan streams
// beside the download) or its unix socket (FILDES: the finished file is scanned in place), and the
// transcoder as the worker runs them.
func realVideoParts(t *testing.T, unix bool) (Scanner, *recordingVideos) {
	t.Helper()
	clamd := testenv.StartClamd(t)
	scfg := scanner.DefaultConfig()
	scfg.Addr = clamd.Addr
	if unix {
		scfg.Addr = clamd.SocketAddr
	}
	s, err := scanner.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := transcoder.NewVideos(transcoder.DefaultVideoConfig())
	if err != nil {
		t.Fatal(err)
	}
	return s, newRecordingVideos(v)
}

func TestVideoJobWithRealClamdAndFFmpeg(t *testing.T) {
	t.Run("tcp", func(t *testing.T) { videoJobWithRealClamdAndFFmpeg(t, false) })
	t.Run("unix socket", func(t *testing.T) { videoJobWithRealClamdAndFFmpeg(t, true) })
}

func videoJobWithRealClamdAndFFmpeg(t *testing.T, unix bool) {
	s, videos := realVideoParts(t, unix)
	if ips, ok := s.(InPlaceScanner); !ok || ips.ScansInPlace() != unix {
		t.Fatalf("the scanner on the unix socket (%t) should scan files in place", unix)
	}
	t.Run("clean", func(t *testing.T) {
		f := videoFixture(t, nil)
		out := f.process(t, s, videos)
		if out.Kind != Success {
			t.Fatalf("kind %s: %v", out.Kind, out.Err)
		}
		if probes, _, transforms, used := videos.counts(); probes != 1 || transforms != 1 || !used {
			t.Fatalf("%d probes, %d transforms, probe reused %t; want one of each, reused", probes, transforms, used)
		}
		m := out.Response.Metadata
		if m == nil || m.Width != 320 || m.Height != 240 || m.VideoCodec != "h264" || m.AudioCodec != "aac" || m.DurationSeconds < 1.9 {
			t.Fatalf("metadata %+v, want the 2 s 320×240 H.264/AAC clip", m)
		}
		var sawMP4, sawPoster bool
		for _, v := range out.Response.Processed {
			got := f.store.objs["media/"+keyOf(t, v.URL)]
			switch v.Format {
			case contracts.FormatMP4:
				sawMP4 = len(got) > 8 && string(got[4:8]) == "ftyp" && v.Width == 320 && v.Height == 240
			case contracts.FormatJPG:
				sawPoster = len(got) > 2 && got[0] == 0xFF && got[1] == 0xD8
			}
		}
		if !sawMP4 || !sawPoster {
			t.Fatalf("stored outputs: MP4 %t, poster %t; response %+v", sawMP4, sawPoster, out.Response.Processed)
		}
	})
	t.Run("infected", func(t *testing.T) {
		before, _, transformsBefore, _ := videos.counts()
		f := videoFixture(t, []byte(testenv.EICAR))
		out := f.process(t, s, videos)
		if out.Kind != Infected || out.Virus == nil || out.Virus.VirusName != testenv.EICARSignature {
			t.Fatalf("kind %s (%v), want infected with %s", out.Kind, out.Err, testenv.EICARSignature)
		}
		probes, _, transforms, _ := videos.counts()
		if probes-before != 1 || transforms != transformsBefore {
			t.Fatalf("%d probes, %d transforms for the infected clip; want its one probe (beside the scan, answer dropped) and no transform",
				probes-before, transforms-transformsBefore)
		}
		if _, ok := f.store.objs["media/u/clip.mp4"]; ok {
			t.Error("infected object still in place")
		}
		if len(out.Response.Processed) != 0 || out.Response.Metadata != nil {
			t.Errorf("an infected upload's response describes it: %+v", out.Response)
		}
	})
}

// keyOf is the object key in one of memStore's URLs.
func keyOf(t *testing.T, url string) string {
	t.Helper()
	const prefix = "https://store.example/media/"
	if len(url) < len(prefix) || url[:len(prefix)] != prefix {
		t.Fatalf("url %q is not one of the store's", url)
	}
	return url[len(prefix):]
}
