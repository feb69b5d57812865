package transcoder_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// brokenImages writes one broken file of each kind a person might upload, named like the scratch
// file the worker uses, and returns them with the message each must get. Go's own testdata gives
// the PNG with a bad CRC; the others are cut from files libvips and Go ship or make.
func brokenImages(t *testing.T) map[string]struct{ path, want string } {
	t.Helper()
	src := t.TempDir()
	cut := func(orig, name string, keep int) string {
		dir := filepath.Join(src, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return testenv.MakeTruncated(t, orig, dir, "input", keep)
	}
	goPNG := filepath.Join(runtime.GOROOT(), "src", "image", "png", "testdata", "invalid-crc32.png")
	badCRC := filepath.Join(src, "badcrc")
	if err := os.Mkdir(badCRC, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(goPNG)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(badCRC, "input"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	jpeg := filepath.Join(runtime.GOROOT(), "src", "image", "testdata", "video-001.jpeg")
	heic := testenv.MakeHEIC(t, t.TempDir(), 640, 480)
	tiff := testenv.MakeTIFF(t, t.TempDir(), 64, 48)
	const truncated = ": it ends before the image does (was the upload cut short?)"
	return map[string]struct{ path, want string }{
		"truncated jpeg": {cut(jpeg, "jpeg", 3000), "decoding image: the JPEG file is truncated" + truncated},
		"png bad crc":    {filepath.Join(badCRC, "input"), "reading image header: the PNG file is corrupt: a checksum in it does not match its data"},
		"truncated heic": {cut(heic, "heic", 3000), "reading image header: the HEIF file is truncated" + truncated},
		// Cut inside its first directory: libvips' TIFF reader no longer claims it.
		"truncated tiff": {cut(tiff, "tiff", 12), "unsupported image: the TIFF file is damaged or is a kind of TIFF that cannot be read"},
	}
}

// TestImageErrorsAreForPeopleAndStable runs broken files many times at once (libvips' error buffer
// is shared by every job in the process) and checks that each file always gets the same message, one
// that names the format and says what is wrong, without scratch paths or library internals.
func TestImageErrorsAreForPeopleAndStable(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	files := brokenImages(t)
	good := testenv.MakeJPEG(t, t.TempDir(), 1600, 1200)

	const rounds = 6
	var (
		mu  sync.Mutex
		got = map[string]map[string]int{}
		wg  sync.WaitGroup
	)
	for name, f := range files {
		got[name] = map[string]int{}
		for range rounds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := im.Transform(context.Background(), f.path, t.TempDir())
				msg := "<nil>"
				if err != nil {
					msg = err.Error()
					if !transcoder.IsBadInput(err) {
						msg = "not bad input: " + msg
					}
				}
				mu.Lock()
				got[name][msg]++
				mu.Unlock()
			}()
		}
	}
	// Good files alongside, so failures interleave with successes that also use the buffer.
	for range rounds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := im.Transform(context.Background(), good, t.TempDir()); err != nil {
				t.Errorf("good file failed beside broken ones: %v", err)
			}
		}()
	}
	wg.Wait()

	for name, f := range files {
		if len(got[name]) != 1 || got[name][f.want] != rounds {
			t.Errorf("%s: got %v, want %q %d times", name, got[name], f.want, rounds)
		}
		for msg := range got[name] {
			for _, bad := range []string{"/", "without a message", "libvips", "magick", "heif:", "Vips", "input"} {
				if strings.Contains(msg, bad) {
					t.Errorf("%s: message %q contains %q", name, msg, bad)
				}
			}
		}
	}
}

// TestImageUnsupportedFormatsAreNamed: formats libvips could read but the worker does not take are
// named as people know them.
func TestImageUnsupportedFormatsAreNamed(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	bmp := filepath.Join(dir, "input")
	// A 1×1 24-bit BMP: 14-byte file header, 40-byte info header, one padded pixel row.
	data := []byte("BM\x3a\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00" +
		"\x28\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x18\x00\x00\x00\x00\x00\x04\x00\x00\x00" +
		"\x13\x0b\x00\x00\x13\x0b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" + "\x00\x00\xff\x00")
	if err := os.WriteFile(bmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := im.Transform(context.Background(), bmp, t.TempDir())
	want := "unsupported image format: BMP (accepted: JPEG, PNG, WebP, GIF, TIFF, HEIC/HEIF or AVIF)"
	if !transcoder.IsBadInput(err) || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}
