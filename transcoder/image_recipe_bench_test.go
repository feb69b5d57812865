package transcoder_test

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
	"github.com/mediaworker/mediaworker/transcoder/vips"
)

// cpuTime is the process's user + system CPU time so far (every thread's: an encoder's helper
// threads count).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAVIFvsWebP measures the CPU time of a 12 MP photo's 2048 px variant encoded as AVIF
// (default quality 50, at each AV1 encoder speed around the chosen one) against the same picture as
// the default high WebP (Q 82, effort 2), and reports their ratio, "avif/webp-cpu", with the sizes.
// The picture is decoded once, as TransformRecipe does, so only the encoders are compared. The
// speed chosen (avifSpeed) keeps the ratio within about 2:
//
//	go test -run '^$' -bench AVIFvsWebP -benchtime 5x ./transcoder
func BenchmarkAVIFvsWebP(b *testing.B) {
	testenv.RequireBinary(b, "ffmpeg")
	src := testenv.MakeNoisyJPEG(b, filepath.Join(b.TempDir(), "photo.jpg"), 4000, 3000, 1)
	if err := vips.Init(); err != nil {
		b.Fatal(err)
	}
	img, err := vips.ThumbnailBox(src, 2048, 2048, false, false)
	if err != nil {
		b.Fatal(err)
	}
	defer img.Close()
	cfg := transcoder.DefaultImageConfig()
	for _, speed := range []int{transcoder.AVIFSpeed - 1, transcoder.AVIFSpeed, transcoder.AVIFSpeed + 1} {
		if speed < 0 || speed > 9 {
			continue
		}
		b.Run(fmt.Sprintf("speed=%d", speed), func(b *testing.B) {
			var webpCPU, avifCPU time.Duration
			var webpBytes, avifBytes int
			for b.Loop() {
				start := cpuTime(b)
				w, err := img.WebP(cfg.QualityHigh, cfg.Effort)
				if err != nil {
					b.Fatal(err)
				}
				mid := cpuTime(b)
				a, err := img.AVIF(transcoder.FormatAVIF.DefaultQuality(), speed)
				if err != nil {
					b.Fatal(err)
				}
				end := cpuTime(b)
				webpCPU += mid - start
				avifCPU += end - mid
				webpBytes, avifBytes = len(w), len(a)
			}
			b.ReportMetric(float64(avifCPU)/float64(webpCPU), "avif/webp-cpu")
			b.ReportMetric((avifCPU / time.Duration(b.N)).Seconds(), "avif-cpu-s")
			b.ReportMetric((webpCPU / time.Duration(b.N)).Seconds(), "webp-cpu-s")
			b.ReportMetric(float64(avifBytes>>10), "avif-KiB")
			b.ReportMetric(float64(webpBytes>>10), "webp-KiB")
		})
	}
}
