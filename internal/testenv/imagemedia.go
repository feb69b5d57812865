package testenv

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
)

// Image kinds the worker takes that the other makers do not cover: AVIF (still and sequence),
// animated WebP and APNG, as phones, browsers and screen tools write them.

// MakeAVIF writes a w×h still AVIF (AV1 intra frame in a HEIF container, ffmpeg's libaom encoder
// with -still-picture, as cameras and browsers save them) of ffmpeg's testsrc2 pattern.
func MakeAVIF(t testing.TB, dir string, w, h int) string {
	t.Helper()
	out := filepath.Join(dir, fmt.Sprintf("avif_%dx%d.avif", w, h))
	return ffmpegImage(t, out, fmt.Sprintf("testsrc2=s=%dx%d", w, h),
		"-c:v", "libaom-av1", "-still-picture", "1", "-cpu-used", "8", "-pix_fmt", "yuv420p")
}

// MakeAVIFSequence writes an animated AVIF (an image sequence, brand avis) of frames frames.
func MakeAVIFSequence(t testing.TB, dir string, w, h, frames int) string {
	t.Helper()
	out := filepath.Join(dir, fmt.Sprintf("avifs_%dx%d_%d.avif", w, h, frames))
	runTool(t, "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-y", "-f", "lavfi",
		"-i", fmt.Sprintf("testsrc2=s=%dx%d:r=10", w, h), "-frames:v", strconv.Itoa(frames),
		"-c:v", "libaom-av1", "-cpu-used", "8", "-pix_fmt", "yuv420p", "-f", "avif", out)
	return out
}

// MakeAnimatedWebP writes an animated WebP with the frames of MakeGIF (red, green, blue, ... 1 s
// each, looping forever), converted by libvips.
func MakeAnimatedWebP(t testing.TB, dir string, w, h, frames int) string {
	t.Helper()
	gif := MakeGIF(t, t.TempDir(), w, h, frames)
	out := filepath.Join(dir, fmt.Sprintf("webp_%dx%d_%dframes.webp", w, h, frames))
	runTool(t, "vips", "copy", gif+"[n=-1]", out)
	return out
}

// MakeAPNG writes an animated PNG of frames frames of ffmpeg's testsrc pattern at 5 fps.
func MakeAPNG(t testing.TB, dir string, w, h, frames int) string {
	t.Helper()
	out := filepath.Join(dir, fmt.Sprintf("apng_%dx%d_%d.png", w, h, frames))
	runTool(t, "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-y", "-f", "lavfi",
		"-i", fmt.Sprintf("testsrc=s=%dx%d:r=5", w, h), "-frames:v", strconv.Itoa(frames),
		"-plays", "0", "-f", "apng", out)
	return out
}
