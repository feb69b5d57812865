package transcoder

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// The metadata walks on real files and on the places decoders read metadata from that a walk over
// headers alone would miss.

// goImage is a file of Go's own image testdata.
func goImage(name string) string {
	return filepath.Join(runtime.GOROOT(), "src", "image", "testdata", name)
}

func measureBytes(t *testing.T, data []byte, format string) metadataTally {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := measureMetadata(p, format)
	if err != nil {
		t.Fatalf("measuring: %v", err)
	}
	return m
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jpegSegment is a JPEG marker segment with a payload of n bytes.
func jpegSegment(marker byte, n int) []byte {
	return append([]byte{0xFF, marker, byte((n + 2) >> 8), byte(n + 2)}, make([]byte, n)...)
}

func TestMetadataWalkJPEG(t *testing.T) {
	base := readFile(t, goImage("video-001.jpeg"))
	prog := readFile(t, goImage("video-001.progressive.jpeg"))
	want := measureBytes(t, base, "JPEG")
	eoi := len(base) - 2
	if !bytes.HasSuffix(base, []byte{0xFF, 0xD9}) {
		t.Fatal("video-001.jpeg does not end with EOI")
	}
	// The second scan of the progressive file: segments between scans are read by libjpeg too.
	secondSOS := bytes.Index(prog[bytes.Index(prog, []byte{0xFF, 0xDA})+2:], []byte{0xFF, 0xDA}) + bytes.Index(prog, []byte{0xFF, 0xDA}) + 2
	progWant := measureBytes(t, prog, "JPEG")
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name  string
		data  []byte
		bytes int64
		segs  int
	}{
		{"a comment after the scan, before EOI", join(base[:eoi], jpegSegment(0xFE, 1000), base[eoi:]), want.bytes + 1000, want.segments + 1},
		{"fill bytes before a marker", join(base[:2], []byte{0xFF, 0xFF, 0xFF}, jpegSegment(0xE1, 500), base[2:]), want.bytes + 500, want.segments + 1},
		{"stray bytes before a marker, which libjpeg skips", join(base[:2], []byte("junk"), jpegSegment(0xE5, 700), base[2:]), want.bytes + 700, want.segments + 1},
		{"an APP1 between the scans of a progressive JPEG", join(prog[:secondSOS], jpegSegment(0xE1, 900), prog[secondSOS:]), progWant.bytes + 900, progWant.segments + 1},
		// MPF's further pictures, a phone's motion photo: never decoded.
		{"a picture after EOI", join(base, jpegSegment(0xE1, 60000), base), want.bytes, want.segments},
		{"a segment cut short", join(base[:2], jpegSegment(0xE1, 60000)[:1004]), 1000, 1},
	} {
		m := measureBytes(t, tc.data, "JPEG")
		if m.bytes != tc.bytes || m.segments != tc.segs {
			t.Errorf("%s: %d bytes in %d segments, want %d in %d", tc.name, m.bytes, m.segments, tc.bytes, tc.segs)
		}
	}
}

// pngChunk is a PNG chunk with a valid CRC.
func pngChunk(typ string, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	b = append(append(b, typ...), data...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[4:]))
}

func TestMetadataWalkPNG(t *testing.T) {
	base := readFile(t, goImage("video-001.png"))
	want := measureBytes(t, base, "PNG")
	iend := len(base) - 12
	text := pngChunk("tEXt", append([]byte("Comment\x00"), bytes.Repeat([]byte("x"), 3000)...))
	for _, tc := range []struct {
		name  string
		data  []byte
		bytes int64
	}{
		{"text after the pixels", bytes.Join([][]byte{base[:iend], text, base[iend:]}, nil), want.bytes + int64(len(text)) - 12},
		{"a private chunk", bytes.Join([][]byte{base[:33], pngChunk("prVt", make([]byte, 5000)), base[33:]}, nil), want.bytes + 5000},
		{"after IEND", append(append([]byte{}, base...), text...), want.bytes},
		// Only what the file holds counts: a chunk claiming 2 GiB, cut off.
		{"a chunk cut short", append(append([]byte{}, base[:33]...), 0x7F, 0xFF, 0xFF, 0xFF, 't', 'E', 'X', 't', 'a', 'b'), 2},
	} {
		if m := measureBytes(t, tc.data, "PNG"); m.bytes != tc.bytes {
			t.Errorf("%s: %d bytes, want %d", tc.name, m.bytes, tc.bytes)
		}
	}
}

// TestMetadataOfRealFiles walks the images other projects ship as test data (Go's, golang.org/x/image,
// mimetype's, imaging's EXIF orientation set, filetype's samples), as app's corpus test does: none
// carries anywhere near the limits, and the ones known to carry metadata are seen to.
func TestMetadataOfRealFiles(t *testing.T) {
	roots := map[string]string{
		"go":       filepath.Join(runtime.GOROOT(), "src", "image"),
		"x/image":  testenv.ModuleDir(t, "golang.org/x/image", "v0.47.0"),
		"mimetype": filepath.Join(testenv.ModuleDir(t, "github.com/gabriel-vasile/mimetype", mimetypeCorpus), "testdata"),
		"imaging":  filepath.Join(testenv.ModuleDir(t, "github.com/disintegration/imaging", "v1.6.2"), "testdata"),
		"filetype": filepath.Join(testenv.ModuleDir(t, "github.com/h2non/filetype", "v1.1.3"), "fixtures"),
	}
	// What a few of them carry, counted by hand from their structure.
	known := map[string]metadataTally{
		"filetype/sample.jpg":       {bytes: 29215, segments: 6},  // JFIF, EXIF, Photoshop, XMP, ICC, Adobe
		"filetype/sample.tif":       {bytes: 27849, segments: 25}, // 25 tags, an ICC profile among them
		"mimetype/heic.single.heic": {bytes: 2884, segments: 3},
		"imaging/orientation_6.jpg": {bytes: 96, segments: 1}, // the EXIF orientation
	}
	walked := 0
	for source, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			sn := sniffImage(p)
			if !isAcceptedFormat(sn.Format) {
				return nil
			}
			walked++
			m, err := measureMetadata(p, sn.Format)
			if err != nil {
				t.Errorf("%s: %v", p, err)
				return nil
			}
			if m.bytes > 1<<20 || m.segments > 100 {
				t.Errorf("%s: %d bytes of metadata in %d %s, more than any real file here should", p, m.bytes, m.segments, m.unit)
			}
			rel, _ := filepath.Rel(root, p)
			if k, ok := known[source+"/"+rel]; ok {
				if m.bytes != k.bytes || m.segments != k.segments {
					t.Errorf("%s/%s: %d bytes in %d %s, want %d in %d", source, rel, m.bytes, m.segments, m.unit, k.bytes, k.segments)
				}
				delete(known, source+"/"+rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for name := range known {
		t.Errorf("%s was not walked", name)
	}
	if walked < 100 {
		t.Errorf("only %d images walked", walked)
	}
}

// mimetypeCorpus is the mimetype release whose module still ships its testdata.
const mimetypeCorpus = "v1.4.3"

// FuzzMeasureMetadata: whatever the bytes, every walk ends, and in the formats read front to back it
// counts no more than the file holds.
func FuzzMeasureMetadata(f *testing.F) {
	for _, name := range []string{"video-001.jpeg", "video-001.progressive.jpeg", "video-001.png", "video-001.gif"} {
		b, err := os.ReadFile(goImage(name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x00\x00\x00\x18ftypavif\x00\x00\x00\x00avifmif1\x00\x00\x00\x0cmeta\x00\x00\x00\x00"))
	f.Add([]byte("II*\x00\x08\x00\x00\x00\x01\x00\xbc\x02\x01\x00\xff\xff\x00\x00\x08\x00\x00\x00"))
	f.Add([]byte("RIFF\x20\x00\x00\x00WEBPEXIF\x10\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, format := range []string{"JPEG", "PNG", "WebP", "GIF", "AVIF", "TIFF"} {
			m, err := measureMetadata(p, format)
			if err != nil {
				t.Fatalf("%s: %v", format, err)
			}
			if m.bytes < 0 || (format != "AVIF" && format != "TIFF" && m.bytes > int64(len(data))) {
				t.Fatalf("%s: %d bytes of metadata in a %d-byte file", format, m.bytes, len(data))
			}
		}
	})
}

func TestMetadataWalkHEIF(t *testing.T) {
	u16 := func(v int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(v)) }
	u32 := func(v int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
	infe := func(id int, typ string) []byte {
		return box("infe", []byte{2, 0, 0, 0}, u16(id), u16(0), []byte(typ), []byte{0})
	}
	// iloc version 1, 4-byte offsets and lengths, a 4-byte base offset: item 1 (the picture) and
	// item 2 (EXIF), one extent each.
	iloc := func(base, exifAt, exifLen int) []byte {
		return box("iloc", []byte{1, 0, 0, 0, 0x44, 0x40}, u16(2),
			u16(1), u16(0), u16(0), u32(base), u16(1), u32(0), u32(100),
			u16(2), u16(0), u16(0), u32(base), u16(1), u32(exifAt), u32(exifLen))
	}
	iinf := func(trailing []byte) []byte {
		return box("iinf", []byte{0, 0, 0, 0}, u16(2), infe(1, "av01"), infe(2, "Exif"), trailing)
	}
	iprp := box("iprp", box("ipco", box("ispe", make([]byte, 12)), box("colr", []byte("prof"), make([]byte, 3000)), box("colr", []byte("nclx"), make([]byte, 7))))
	const exif = 5000
	build := func(ilocFirst bool, trailing []byte, exifLen, mdat int) []byte {
		ftyp := box("ftyp", []byte("avif\x00\x00\x00\x00avifmif1"))
		meta := func(base int) []byte {
			kids := [][]byte{{0, 0, 0, 0}, box("pitm", []byte{0, 0, 0, 0}, u16(1)), iinf(trailing), iloc(base, 100, exifLen), iprp}
			if ilocFirst {
				kids[2], kids[3] = kids[3], kids[2]
			}
			return box("meta", kids...)
		}
		base := len(ftyp) + len(meta(0)) + 8 // the mdat's payload
		return bytes.Join([][]byte{ftyp, meta(base), box("mdat", make([]byte, mdat))}, nil)
	}
	for _, tc := range []struct {
		name  string
		data  []byte
		bytes int64
	}{
		{"iinf before iloc", build(false, nil, exif, 100+exif), exif + 3000},
		{"iloc before iinf", build(true, nil, exif, 100+exif), exif + 3000},
		// libheif reads the entries iinf declares and skips the rest: iloc after it is still read.
		{"bytes after iinf's entries", build(false, []byte("junk after the entries"), exif, 100+exif), exif + 3000},
		{"an EXIF item running past the end of the file", build(false, nil, 1<<30, 100+exif), exif + 3000},
	} {
		m := measureBytes(t, tc.data, "AVIF")
		if m.bytes != tc.bytes || m.segments != 2 {
			t.Errorf("%s: %d bytes in %d items, want %d in 2 (the EXIF item and the ICC profile)", tc.name, m.bytes, m.segments, tc.bytes)
		}
	}
}
