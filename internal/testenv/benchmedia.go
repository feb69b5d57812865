package testenv

// Media for the benchmark (bench/): photo-sized images, uncompressed video for large inputs, and
// incompressible bytes for scanning. The makers are slower than the small ones in media.go (a 24 MP
// HEIC takes about 45 s to encode on 2 cores), so they get a longer timeout, and the benchmark caches
// what they write.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// benchToolTimeout bounds one benchmark media command: x265 encoding a 24 MP HEIC on a busy 2-core
// machine is the slowest.
const benchToolTimeout = 10 * time.Minute

// runSlowTool is runTool with benchToolTimeout.
func runSlowTool(t testing.TB, name string, args ...string) {
	t.Helper()
	bin := RequireBinary(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), benchToolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("running %s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
}

// photoSource is testsrc2 (sharp edges, text, gradients, motion) with uniform grain on top, so an image
// costs a decoder and the WebP encoder about what a camera photo costs, rather than what a flat test
// pattern costs.
func photoSource(w, h int) string {
	return fmt.Sprintf("testsrc2=s=%dx%d,noise=alls=20:allf=u", w, h)
}

// MakePhoto writes a w×h photo-like image into dir as format "jpeg", "png" or "heic" and returns its
// path (dir/photo_<w>x<h>.<ext>). HEIC goes through a temporary JPEG and libvips' heifsave (x265).
func MakePhoto(t testing.TB, dir, format string, w, h int) string {
	t.Helper()
	base := filepath.Join(dir, fmt.Sprintf("photo_%dx%d", w, h))
	switch format {
	case "jpeg":
		return ffmpegImage(t, base+".jpg", photoSource(w, h), "-q:v", "2")
	case "png":
		return ffmpegImage(t, base+".png", photoSource(w, h), "-pix_fmt", "rgb24")
	case "heic":
		jpg := ffmpegImage(t, filepath.Join(t.TempDir(), "src.jpg"), photoSource(w, h), "-q:v", "2")
		out := base + ".heic"
		runSlowTool(t, "vips", "copy", jpg, out+"[Q=80]")
		return out
	default:
		t.Fatalf("MakePhoto: unknown format %q (want jpeg, png or heic)", format)
		return ""
	}
}

// MakeRawVideo writes dir/name: frames of w×h testsrc2 at 25 fps as uncompressed 4:2:2 video
// (rawvideo uyvy422, QuickTime's "2vuy") in a .mov. It is a large input (w×h×2 bytes a frame: 1080p is
// 4.1 MB, so 250 frames make 1 GiB) that is fast to write and to decode, so a benchmark of a large
// upload measures moving and scanning the bytes rather than a decoder. (QuickTime has no tag for raw
// 4:2:0, which ffprobe then cannot read.)
func MakeRawVideo(t testing.TB, dir, name string, w, h, frames int) string {
	t.Helper()
	out := filepath.Join(dir, name)
	runSlowTool(t, "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-y",
		"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=s=%dx%d:r=25", w, h),
		"-frames:v", strconv.Itoa(frames), "-c:v", "rawvideo", "-pix_fmt", "uyvy422",
		"-f", "mov", out)
	return out
}

// MakeRandomFile writes size pseudo-random bytes to path and returns it. The generator is seeded, so
// every run scans the same incompressible bytes.
func MakeRandomFile(t testing.TB, path string, size int64) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("creating %s: %v", path, err)
	}
	r := rand.New(rand.NewPCG(5, 2026))
	src := readerFunc(func(p []byte) (int, error) {
		for i := 0; i < len(p); i += 8 {
			v := r.Uint64()
			for j := 0; j < 8 && i+j < len(p); j++ {
				p[i+j] = byte(v >> (8 * j))
			}
		}
		return len(p), nil
	})
	if _, err := io.CopyN(f, src, size); err != nil {
		f.Close()
		t.Fatalf("writing %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	return path
}

type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// NoisySource is the lavfi graph of MakeNoisyJPEG: testsrc2 with Gaussian noise of strength 30 over
// every plane (ffmpeg's noise filter without the u flag draws Gaussian values), seeded, so each seed
// is a different, reproducible picture with the grain of a photo taken in dim light. Noise like this
// is what costs a JPEG decoder (every coefficient is non-zero) and the WebP encoder most.
func NoisySource(w, h, seed int) string {
	return fmt.Sprintf("testsrc2=s=%dx%d,noise=alls=30:allf=t:all_seed=%d", w, h, seed)
}

// MakeNoisyJPEG writes path: a w×h JPEG of NoisySource(w, h, seed) at ffmpeg's -q:v 2 (about the
// quality a camera writes).
func MakeNoisyJPEG(t testing.TB, path string, w, h, seed int) string {
	t.Helper()
	runSlowTool(t, "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-y",
		"-f", "lavfi", "-i", NoisySource(w, h, seed), "-frames:v", "1", "-update", "1", "-q:v", "2", path)
	return path
}
