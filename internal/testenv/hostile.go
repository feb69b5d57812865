package testenv

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Hostile media: files that lie about themselves or are not what their name says. Each is built in
// Go or from a small valid file, in milliseconds.

// MakeGIFFrames writes a w×h animated GIF of frames frames (alternating black and white), built with
// image/gif, so thousands of frames cost milliseconds.
func MakeGIFFrames(t testing.TB, dir string, w, h, frames int) string {
	t.Helper()
	pal := color.Palette{color.Black, color.White}
	anim := &gif.GIF{LoopCount: 0}
	for i := range frames {
		img := image.NewPaletted(image.Rect(0, 0, w, h), pal)
		if i%2 == 1 {
			for p := range img.Pix {
				img.Pix[p] = 1
			}
		}
		anim.Image = append(anim.Image, img)
		anim.Delay = append(anim.Delay, 1)
	}
	out := filepath.Join(dir, fmt.Sprintf("gif_%dx%d_%dframes.gif", w, h, frames))
	var buf bytes.Buffer
	if err := gif.EncodeAll(&buf, anim); err != nil {
		t.Fatalf("encoding gif: %v", err)
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// MakeGIFScreen writes a GIF whose logical screen is w×h (at most 65535 each) but whose only frame
// is 1×1: a decoder that trusts the header allocates w×h×4 bytes for a 40-byte file.
func MakeGIFScreen(t testing.TB, dir string, w, h int) string {
	t.Helper()
	anim := &gif.GIF{
		Image:  []*image.Paletted{image.NewPaletted(image.Rect(0, 0, 1, 1), color.Palette{color.Black, color.White})},
		Delay:  []int{0},
		Config: image.Config{Width: w, Height: h, ColorModel: color.Palette{color.Black, color.White}},
	}
	var buf bytes.Buffer
	if err := gif.EncodeAll(&buf, anim); err != nil {
		t.Fatalf("encoding gif: %v", err)
	}
	out := filepath.Join(dir, fmt.Sprintf("gif_screen_%dx%d.gif", w, h))
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// MakeVideoClaimingDuration writes dir/name: a 1 s 320×240 H.264 MP4 whose movie header (mvhd) and
// first track header (tkhd) are rewritten to claim the given duration. The samples are untouched, so
// the file plays for 1 s, but ffprobe reports the claim as the container's duration.
func MakeVideoClaimingDuration(t testing.TB, dir, name string, claimed time.Duration) string {
	t.Helper()
	out := MakeVideo(t, dir, name, VideoOpts{Container: "mp4", FastStart: true})
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ms, me := mp4Box(t, data, 0, len(data), "moov")
	hs, _ := mp4Box(t, data, ms, me, "mvhd")
	// mvhd: version+flags (4), then creation and modification times (4 or 8 each), timescale (4),
	// duration (4 or 8) in the timescale.
	var timescale uint32
	var durOff int
	if data[hs] == 1 {
		timescale = binary.BigEndian.Uint32(data[hs+20:])
		durOff = hs + 24
	} else {
		timescale = binary.BigEndian.Uint32(data[hs+12:])
		durOff = hs + 16
	}
	units := uint64(claimed.Seconds() * float64(timescale))
	putDuration := func(off int, version byte) {
		if version == 1 {
			binary.BigEndian.PutUint64(data[off:], units)
			return
		}
		if units > math.MaxUint32 {
			t.Fatalf("MakeVideoClaimingDuration: %s does not fit a version 0 header", claimed)
		}
		binary.BigEndian.PutUint32(data[off:], uint32(units))
	}
	putDuration(durOff, data[hs])
	// tkhd (in the movie's timescale): version+flags (4), creation and modification (4 or 8 each),
	// track id (4), reserved (4), duration.
	ts, te := mp4Box(t, data, ms, me, "trak")
	ks, _ := mp4Box(t, data, ts, te, "tkhd")
	if data[ks] == 1 {
		putDuration(ks+28, 1)
	} else {
		putDuration(ks+20, 0)
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// mp4Box finds the first box of type typ between start and end and returns its payload's bounds.
func mp4Box(t testing.TB, data []byte, start, end int, typ string) (int, int) {
	t.Helper()
	for off := start; off+8 <= end; {
		size := int(binary.BigEndian.Uint32(data[off:]))
		if size < 8 || off+size > end {
			break
		}
		if string(data[off+4:off+8]) == typ {
			return off + 8, off + size
		}
		off += size
	}
	t.Fatalf("no %s box", typ)
	return 0, 0
}

// MakeZip writes dir/zipName: a zip archive holding one file, name, with content (deflated).
func MakeZip(t testing.TB, dir, zipName, name string, content []byte) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, zipName)
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// MakeFFconcat writes dir/name: an ffconcat list naming the given files (ffmpeg resolves relative
// names against the list's directory). Read without a format whitelist, it plays them.
func MakeFFconcat(t testing.TB, dir, name string, files ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("ffconcat version 1.0\n")
	for _, f := range files {
		fmt.Fprintf(&b, "file '%s'\n", f)
	}
	return writeText(t, dir, name, b.String())
}

// MakeM3U8 writes dir/name: an HLS VOD playlist with one 10 s segment per URI (file:///..., http://...).
func MakeM3U8(t testing.TB, dir, name string, uris ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:10\n#EXT-X-PLAYLIST-TYPE:VOD\n")
	for _, u := range uris {
		fmt.Fprintf(&b, "#EXTINF:10.0,\n%s\n", u)
	}
	b.WriteString("#EXT-X-ENDLIST\n")
	return writeText(t, dir, name, b.String())
}

func writeText(t testing.TB, dir, name, text string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// MakeTruncated writes dir/name: the first keep bytes of src.
func MakeTruncated(t testing.TB, src, dir, name string, keep int) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if keep > len(data) {
		t.Fatalf("MakeTruncated: %s has only %d bytes", src, len(data))
	}
	out := filepath.Join(dir, name)
	if err := os.WriteFile(out, data[:keep], 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// MakeNestedZip writes dir/name: a zip holding a zip holding ... (depth levels) a short text file.
// Deeper than clamd's MaxRecursion (17 by default), it is what clamd cannot scan in full.
func MakeNestedZip(t testing.TB, dir, name string, depth int) string {
	t.Helper()
	data, inner := []byte("innermost\n"), "inner.txt"
	for level := range depth {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, err := zw.CreateHeader(&zip.FileHeader{Name: inner, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		data, inner = buf.Bytes(), fmt.Sprintf("level%02d.zip", level)
	}
	out := filepath.Join(dir, name)
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
