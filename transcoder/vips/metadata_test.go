package vips

import (
	"bytes"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// TestThumbnailDropsTheSourcesMetadata: a decoded image carries none of its source's metadata to the
// encoder. libvips 8.14.1's webpsave rebuilt an EXIF chunk from the source's whatever strip said:
// on a HEIF's 1 MiB EXIF item it crashed the process (SIGSEGV), from 8 MiB it failed ("exif too
// large").
func TestThumbnailDropsTheSourcesMetadata(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, path := range map[string]string{
		"avif with a 1 MiB exif item":   testenv.MakeAVIFWithExif(t, dir, "exif.avif", 1<<20),
		"webp with a 12 MiB exif chunk": testenv.MakeWebPWithChunk(t, dir, "exif.webp", "EXIF", 12<<20),
		"webp with a 12 MiB xmp chunk":  testenv.MakeWebPWithChunk(t, dir, "xmp.webp", "XMP ", 12<<20),
	} {
		im, err := Thumbnail(path, 256, false, false)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		small, err := im.Thumbnail(32)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, img := range []*Image{im, small} {
			data, err := img.WebP(75, 0)
			if err != nil {
				t.Fatalf("%s: encoding: %v", name, err)
			}
			if bytes.Contains(data, []byte("EXIF")) || bytes.Contains(data, []byte("XMP ")) {
				t.Errorf("%s: the WebP carries metadata", name)
			}
			img.Close()
		}
	}
}
