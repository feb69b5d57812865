package transcoder

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

func TestPlanPoster(t *testing.T) {
	for _, tc := range []struct {
		duration float64
		want     []float64
	}{
		{10, []float64{1, 2, 3, 4, 5}},          // from 1 s to half the video
		{7, []float64{0.7, 1.4, 2.1, 2.8, 3.5}}, // 10% in
		{3600, []float64{1, 4.5, 8, 11.5, 15}},  // the opening: 15 s at most
		{0, []float64{0, 1, 2, 3, 4}},           // length unknown
	} {
		pl := planPoster(tc.duration)
		var got []float64
		for i := range posterCandidates {
			got = append(got, math.Round(pl.at(i)*1000)/1000)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%g s: candidates at %v, want %v", tc.duration, got, tc.want)
		}
	}
}

// docs/contract.md tells API developers how the poster is chosen and how large it is: a constant
// changed without the doc fails here.
func TestContractDescribesThePoster(t *testing.T) {
	contract := readOneLine(t, "../docs/contract.md")
	for _, want := range []string{
		fmt.Sprintf("at most %d pixels on its long edge and never enlarged", posterMaxSide),
		fmt.Sprintf("chosen among %d frames from 10%% into the video (at most 1 s) to its middle (at most %g s in; 0 to %g s when the length is unknown)",
			posterCandidates, posterWindow, posterWindowUnknown),
	} {
		if !strings.Contains(contract, want) {
			t.Errorf("docs/contract.md does not say %q", want)
		}
	}
}

// lumaPlane is a w×h plane filled by f(x, y).
func lumaPlane(w, h int, f func(x, y int) uint8) []uint8 {
	pix := make([]uint8, w*h)
	for y := range h {
		for x := range w {
			pix[y*w+x] = f(x, y)
		}
	}
	return pix
}

// boxBlur blurs a plane with a (2r+1)² box, r = 3 about a Gaussian of σ = 2.
func boxBlur(pix []uint8, w, h, r int) []uint8 {
	out := make([]uint8, len(pix))
	for y := range h {
		for x := range w {
			sum, n := 0, 0
			for dy := -r; dy <= r; dy++ {
				for dx := -r; dx <= r; dx++ {
					if xx, yy := x+dx, y+dy; xx >= 0 && xx < w && yy >= 0 && yy < h {
						sum += int(pix[yy*w+xx])
						n++
					}
				}
			}
			out[y*w+x] = uint8(sum / n)
		}
	}
	return out
}

func TestLookAtLuma(t *testing.T) {
	const w, h = 320, 240
	// Sharp content: blocks of 16 px in four levels, as a scene with hard edges.
	scene := lumaPlane(w, h, func(x, y int) uint8 { return uint8(40 + 50*((x/16+y/16*3)%4)) })
	night := lumaPlane(w, h, func(x, y int) uint8 { // mostly dark, with lit windows
		if (x/16+y/16)%5 == 0 {
			return 200
		}
		return 10
	})
	for _, tc := range []struct {
		name                 string
		pix                  []uint8
		black, flat, blurred bool
	}{
		{"black", lumaPlane(w, h, func(x, y int) uint8 { return 0 }), true, true, true},
		{"black with noise", lumaPlane(w, h, func(x, y int) uint8 { return uint8((x*7 + y*13) % 20) }), true, true, true},
		{"white flash", lumaPlane(w, h, func(x, y int) uint8 { return 255 }), false, true, true},
		{"grey middle of a fade", lumaPlane(w, h, func(x, y int) uint8 { return uint8(100 + (x+y)%6) }), false, true, true},
		{"scene", scene, false, false, false},
		{"scene out of focus", boxBlur(scene, w, h, 3), false, false, true},
		{"night scene", night, false, false, false},
	} {
		l := lookAtLuma(tc.pix, w, w, h)
		if l.black != tc.black || l.flat != tc.flat || l.blurred != tc.blurred {
			t.Errorf("%s: black %v flat %v blurred %v, want %v %v %v (detail %.1f)", tc.name, l.black, l.flat, l.blurred,
				tc.black, tc.flat, tc.blurred, l.detail)
		}
		if l.usable() != (!tc.black && !tc.flat && !tc.blurred) {
			t.Errorf("%s: usable %v", tc.name, l.usable())
		}
	}
	if a, b := lookAtLuma(scene, w, w, h), lookAtLuma(boxBlur(scene, w, h, 3), w, w, h); a.detail <= b.detail {
		t.Errorf("the sharp scene has less detail (%.1f) than the blurred one (%.1f)", a.detail, b.detail)
	}
}

// childCPU is the CPU time of this process's waited-for children (ffmpeg runs) plus its own.
func childCPU() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// BenchmarkVideoPosterCPU prices the poster on a 10 s 1080p25 H.264/AAC MP4 (testsrc2, the bench
// corpus's 1080p-h264.mp4 at 10 s), in CPU time (ffmpeg's and the worker's own, which looks at the
// candidates): the run beside a remux, as the worker makes it (its first candidate is usable, so one
// ffmpeg run), and the encode with its poster output against the encode without it (interleaved; the
// difference is the poster's part, and choosing it in Go is timed alone). Run it with
//
//	go test ./transcoder/ -run '^$' -bench BenchmarkVideoPosterCPU -benchtime 5x
func BenchmarkVideoPosterCPU(b *testing.B) {
	dir := b.TempDir()
	src := testenv.MakeVideo(b, dir, "src.mp4", testenv.VideoOpts{Width: 1920, Height: 1080, Seconds: 10, FPS: 25,
		ACodec: "aac", Container: "mp4", FastStart: true})
	v, err := NewVideos(DefaultVideoConfig())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	pr, err := v.Probe(ctx, src)
	if err != nil {
		b.Fatal(err)
	}
	plan := planPoster(pr.Info.Duration)
	out := b.TempDir()
	cpu := func(f func()) time.Duration {
		before := childCPU()
		f()
		return childCPU() - before
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	report := func(b *testing.B, d []time.Duration, name string) {
		b.ReportMetric(float64(median(d).Milliseconds()), name)
	}
	b.Run("remux-poster", func(b *testing.B) {
		var runs []time.Duration
		for range b.N {
			runs = append(runs, cpu(func() {
				if _, _, err := v.poster(ctx, src, pr.p.videoStream, plan, out); err != nil {
					b.Fatal(err)
				}
			}))
		}
		report(b, runs, "cpu-ms")
	})
	b.Run("encode", func(b *testing.B) {
		var with, without, choose []time.Duration
		mp4 := filepath.Join(out, mp4Name)
		for range b.N {
			with = append(with, cpu(func() {
				if err := v.encode(ctx, src, pr.p, out, mp4, &plan); err != nil {
					b.Fatal(err)
				}
			}))
			choose = append(choose, cpu(func() {
				if _, _, ok, err := choosePoster(out, plan); !ok || err != nil {
					b.Fatal("no poster", err)
				}
			}))
			os.Remove(filepath.Join(out, posterName))
			without = append(without, cpu(func() {
				if err := v.encode(ctx, src, pr.p, out, mp4, nil); err != nil {
					b.Fatal(err)
				}
			}))
		}
		report(b, with, "with-poster-cpu-ms")
		report(b, without, "without-cpu-ms")
		report(b, choose, "choose-cpu-ms")
	})
}
