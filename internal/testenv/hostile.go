package testenv

import (
	"archive/zip"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// Metadata bombs: small pictures carrying far more metadata than any camera writes. Payloads that are
// zeros are left as holes in the file (seeked past), so a 250 MB bomb costs milliseconds and little
// disk, and reads back as zeros.

// writeSparse writes out: each piece at its offset, the gaps between them and up to size as holes.
func writeSparse(t testing.TB, out string, size int64, pieces map[int64][]byte) string {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off, b := range pieces {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// MakeJPEGWithSegments writes dir/name: MakeJPEG's 640×480 JPEG carrying n more segments of marker
// (0xE1 APP1, 0xE2 APP2, 0xFE COM, ...) right after SOI, each with payload bytes (at most 65533): an
// APP1's starts "Exif\0\0", the rest are zeros.
func MakeJPEGWithSegments(t testing.TB, dir, name string, marker byte, n, payload int) string {
	t.Helper()
	if payload > 65533 {
		t.Fatalf("MakeJPEGWithSegments: a segment holds at most 65533 bytes, not %d", payload)
	}
	data, err := os.ReadFile(MakeJPEG(t, t.TempDir(), 640, 480))
	if err != nil {
		t.Fatal(err)
	}
	head := []byte{0xFF, marker, byte((payload + 2) >> 8), byte(payload + 2)}
	if marker == 0xE1 {
		head = append(head, "Exif\x00\x00"[:min(6, payload)]...)
	}
	pieces := map[int64][]byte{0: data[:2]}
	off := int64(2)
	for range n {
		pieces[off] = head
		off += int64(4 + payload)
	}
	pieces[off] = data[2:]
	return writeSparse(t, filepath.Join(dir, name), off+int64(len(data)-2), pieces)
}

// MakePNGWithChunk writes dir/name: a 640×480 PNG of testsrc2 carrying, right after IHDR, one chunk
// of type typ with a text of n bytes: "tEXt" (keyword Comment, the text as is) or "zTXt" (the text
// zlib-stored, uncompressed, so the chunk is as big as the text).
func MakePNGWithChunk(t testing.TB, dir, name, typ string, n int) string {
	t.Helper()
	data, err := os.ReadFile(ffmpegImage(t, filepath.Join(t.TempDir(), "base.png"), "testsrc2=s=640x480"))
	if err != nil {
		t.Fatal(err)
	}
	text := bytes.Repeat([]byte("x"), n)
	var body bytes.Buffer
	body.WriteString("Comment\x00")
	switch typ {
	case "tEXt":
		body.Write(text)
	case "zTXt":
		body.WriteByte(0) // compression method: zlib
		zw, err := zlib.NewWriterLevel(&body, zlib.NoCompression)
		if err != nil {
			t.Fatal(err)
		}
		zw.Write(text)
		zw.Close()
	default:
		t.Fatalf("MakePNGWithChunk: unknown chunk type %q", typ)
	}
	var chunk bytes.Buffer
	binary.Write(&chunk, binary.BigEndian, uint32(body.Len()))
	chunk.WriteString(typ)
	chunk.Write(body.Bytes())
	binary.Write(&chunk, binary.BigEndian, crc32.ChecksumIEEE(chunk.Bytes()[4:]))
	const afterIHDR = 8 + 25
	out := append(append(append([]byte{}, data[:afterIHDR]...), chunk.Bytes()...), data[afterIHDR:]...)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// MakeTIFFWithXMP writes dir/name: MakeTIFF's 640×480 TIFF whose first directory also has an XMP tag
// (700) of n bytes; the directory is rewritten at the end of the file, the XMP after it.
func MakeTIFFWithXMP(t testing.TB, dir, name string, n int64) string {
	t.Helper()
	data, err := os.ReadFile(MakeTIFF(t, t.TempDir(), 640, 480))
	if err != nil {
		t.Fatal(err)
	}
	if string(data[:4]) != "II*\x00" {
		t.Fatalf("MakeTIFFWithXMP: libvips wrote %q, not a little-endian TIFF", data[:4])
	}
	le := binary.LittleEndian
	ifd := int(le.Uint32(data[4:8]))
	count := int(le.Uint16(data[ifd:]))
	entries := make([][]byte, 0, count+1)
	for i := range count {
		entries = append(entries, data[ifd+2+12*i:ifd+14+12*i])
	}
	newIFD := (len(data) + 1) &^ 1
	xmpAt := newIFD + 2 + 12*(count+1) + 4
	xmp := make([]byte, 12)
	le.PutUint16(xmp[0:], 700)
	le.PutUint16(xmp[2:], 1) // BYTE
	le.PutUint32(xmp[4:], uint32(n))
	le.PutUint32(xmp[8:], uint32(xmpAt))
	entries = append(entries, xmp)
	slices.SortFunc(entries, func(a, b []byte) int { return int(le.Uint16(a)) - int(le.Uint16(b)) })
	var d bytes.Buffer
	binary.Write(&d, le, uint16(len(entries)))
	for _, e := range entries {
		d.Write(e)
	}
	binary.Write(&d, le, uint32(0)) // no next directory
	head := append([]byte{}, data...)
	le.PutUint32(head[4:8], uint32(newIFD))
	return writeSparse(t, filepath.Join(dir, name), int64(xmpAt)+n, map[int64][]byte{
		0: head, int64(newIFD): d.Bytes(), int64(xmpAt): []byte("<x:xmpmeta xmlns:x='adobe:ns:meta/'>"),
	})
}

// MakeWebPWithChunk writes dir/name: MakeWebP's 640×480 WebP (an extended one, VP8X) ending with a
// chunk of type typ ("EXIF", "XMP ", "ICCP") of n bytes, flagged in VP8X.
func MakeWebPWithChunk(t testing.TB, dir, name, typ string, n int64) string {
	t.Helper()
	data, err := os.ReadFile(MakeWebP(t, t.TempDir(), 640, 480))
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]byte{"ICCP": 0x20, "EXIF": 0x08, "XMP ": 0x04}
	var body bytes.Buffer
	for off := 12; off+8 <= len(data); {
		typ := string(data[off : off+4])
		size := int(binary.LittleEndian.Uint32(data[off+4:]))
		if typ == "VP8X" || typ == "VP8 " || typ == "VP8L" || typ == "ALPH" {
			body.Write(data[off : off+8+size+size&1])
		}
		off += 8 + size + size&1
	}
	b := body.Bytes()
	if string(b[:4]) != "VP8X" { // a simple WebP: VP8X goes first, canvas 640×480
		b = append([]byte("VP8X\x0a\x00\x00\x00\x00\x00\x00\x00\x7f\x02\x00\xdf\x01\x00"), b...)
	}
	b[8] |= flags[typ]
	total := int64(4+len(b)+8) + n + n&1
	head := make([]byte, 0, 12+len(b)+8)
	head = append(head, "RIFF"...)
	head = binary.LittleEndian.AppendUint32(head, uint32(total))
	head = append(head, "WEBP"...)
	head = append(head, b...)
	head = append(head, typ...)
	head = binary.LittleEndian.AppendUint32(head, uint32(n))
	return writeSparse(t, filepath.Join(dir, name), 8+total, map[int64][]byte{0: head})
}

// MakeGIFWithComment writes dir/name: a 64×48 GIF carrying a comment extension of n bytes.
func MakeGIFWithComment(t testing.TB, dir, name string, n int) string {
	t.Helper()
	data, err := os.ReadFile(ffmpegImage(t, filepath.Join(t.TempDir(), "base.gif"), "testsrc2=s=64x48"))
	if err != nil {
		t.Fatal(err)
	}
	at := 13
	if data[10]&0x80 != 0 {
		at += 3 << (data[10]&7 + 1)
	}
	com := []byte{0x21, 0xFE}
	for left := n; left > 0; left -= 255 {
		k := min(left, 255)
		com = append(com, byte(k))
		com = append(com, bytes.Repeat([]byte("c"), k)...)
	}
	com = append(com, 0)
	out := append(append(append([]byte{}, data[:at]...), com...), data[at:]...)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// MakeAVIFWithExif writes dir/name: MakeAVIF's 64×48 still AVIF with an Exif item of n bytes
// describing its picture (iinf, iloc and a cdsc reference in iref), the item's data after mdat.
func MakeAVIFWithExif(t testing.TB, dir, name string, n int64) string {
	t.Helper()
	data, err := os.ReadFile(MakeAVIF(t, t.TempDir(), 64, 48))
	if err != nil {
		t.Fatal(err)
	}
	box := func(typ string, body ...[]byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(8+len(bytes.Join(body, nil))))
		return append(append(b, typ...), bytes.Join(body, nil)...)
	}
	ms, me := mp4Box(t, data, 0, len(data), "meta")
	ds, _ := mp4Box(t, data, 0, len(data), "mdat")
	// ffmpeg's meta: hdlr, pitm, iloc (version 0, 4-byte offsets and lengths, no base offset), iinf
	// (version 0), iprp. Rebuilt with the Exif item added to iloc and iinf, and an iref.
	var kids [][]byte
	var iloc, iinf []byte
	for off := ms + 4; off+8 <= me; {
		size := int(binary.BigEndian.Uint32(data[off:]))
		switch string(data[off+4 : off+8]) {
		case "iloc":
			iloc = data[off : off+size]
		case "iinf":
			iinf = data[off : off+size]
		default:
			kids = append(kids, data[off:off+size])
		}
		off += size
	}
	if iloc == nil || iinf == nil || iloc[8] != 0 || iloc[12] != 0x44 || iloc[13] != 0 || iinf[8] != 0 {
		t.Fatalf("MakeAVIFWithExif: ffmpeg wrote a meta box of another layout")
	}
	infe := box("infe", []byte{2, 0, 0, 0}, []byte{0, 2, 0, 0}, []byte("Exif"), []byte{0})
	newIinf := box("iinf", []byte{0, 0, 0, 0}, binary.BigEndian.AppendUint16(nil, binary.BigEndian.Uint16(iinf[12:])+1), iinf[14:], infe)
	iref := box("iref", []byte{0, 0, 0, 0}, box("cdsc", []byte{0, 2, 0, 1, 0, 1}))
	items := int(binary.BigEndian.Uint16(iloc[14:]))
	// Everything after meta moves by the growth of meta; the Exif data goes after the last byte.
	growth := 14 + len(infe) + len(iref)
	newIloc := append([]byte{}, iloc...)
	binary.BigEndian.PutUint32(newIloc, uint32(len(iloc)+14))
	binary.BigEndian.PutUint16(newIloc[14:], uint16(items+1))
	for i, off := 0, 16; i < items; i++ {
		extents := int(binary.BigEndian.Uint16(newIloc[off+4:]))
		for e := range extents {
			p := off + 6 + 8*e
			binary.BigEndian.PutUint32(newIloc[p:], binary.BigEndian.Uint32(newIloc[p:])+uint32(growth))
		}
		off += 6 + 8*extents
	}
	exifAt := int64(len(data) + growth)
	newIloc = append(newIloc, 0, 2, 0, 0, 0, 1)
	newIloc = binary.BigEndian.AppendUint32(newIloc, uint32(exifAt))
	newIloc = binary.BigEndian.AppendUint32(newIloc, uint32(n))
	meta := box("meta", append([][]byte{{0, 0, 0, 0}, kids[0], kids[1], newIloc, newIinf, iref}, kids[2:]...)...)
	if len(meta) != me-ms+8+growth {
		t.Fatalf("MakeAVIFWithExif: meta grew by %d bytes, not %d", len(meta)-(me-ms+8), growth)
	}
	head := append(append(append([]byte{}, data[:ms-8]...), meta...), data[ds-8:]...)
	// The Exif item: the offset of the TIFF header (0), then a big-endian TIFF header with no IFD.
	return writeSparse(t, filepath.Join(dir, name), exifAt+n, map[int64][]byte{
		0: head, exifAt: []byte("\x00\x00\x00\x00MM\x00*\x00\x00\x00\x00"),
	})
}

// MakeAVIFDeclaring writes dir/name: MakeAVIF's 64×48 still AVIF whose image spatial extents (ispe)
// declare w×h: a decoder that trusts the header allocates for w×h.
func MakeAVIFDeclaring(t testing.TB, dir, name string, w, h int) string {
	t.Helper()
	data, err := os.ReadFile(MakeAVIF(t, t.TempDir(), 64, 48))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("ispe"))
	if i < 0 || bytes.Count(data, []byte("ispe")) != 1 {
		t.Fatal("MakeAVIFDeclaring: not one ispe box in ffmpeg's AVIF")
	}
	binary.BigEndian.PutUint32(data[i+8:], uint32(w))
	binary.BigEndian.PutUint32(data[i+12:], uint32(h))
	out := filepath.Join(dir, name)
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// MakeThinVideo writes dir/name: a valid 1 s w×h video of sizes H.264 in yuv420p cannot hold (1
// pixel wide, an odd width) or libx264 cannot encode (more than 16384 pixels on a side). A name
// ending in .mp4 gets MPEG-4 Part 2 (at most 8191 pixels on a side), one ending in .mkv FFV1 in
// Matroska.
func MakeThinVideo(t testing.TB, dir, name string, w, h int) string {
	t.Helper()
	codec := map[string][]string{
		".mp4": {"-c:v", "mpeg4", "-q:v", "5", "-f", "mp4"},
		".mkv": {"-c:v", "ffv1", "-f", "matroska"},
	}[filepath.Ext(name)]
	if codec == nil {
		t.Fatalf("MakeThinVideo: %s is neither .mp4 nor .mkv", name)
	}
	out := filepath.Join(dir, name)
	args := []string{"-nostdin", "-hide_banner", "-v", "error", "-y", "-f", "lavfi",
		"-i", "testsrc=s=" + strconv.Itoa(w) + "x" + strconv.Itoa(h) + ":r=10:d=1"}
	runTool(t, "ffmpeg", append(append(args, codec...), out)...)
	return out
}

// MakeStripePNG writes dir/name: a w×h PNG (1×65535 and 65535×1 are the extremes PNG and libvips
// take) whose first three quarters along its long side are red (#ff0000) and the rest blue
// (#0000ff), so its dominant colour is red and its palette red then blue.
func MakeStripePNG(t testing.TB, dir, name string, w, h int) string {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	long := max(w, h)
	red, blue := color.NRGBA{R: 0xff, A: 0xff}, color.NRGBA{B: 0xff, A: 0xff}
	for y := range h {
		for x := range w {
			c := red
			if max(x, y)*4 >= long*3 {
				c = blue
			}
			img.SetNRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
