package testenv

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// MP4s whose index misleads: encrypted (DRM) tracks, fragmented files whose movie extends header
// declares a duration the fragments do not hold, and an init segment without its media.

// MakeEncryptedVideo writes dir/name: a 320×240 H.264 MP4 of seconds seconds whose video track is
// CENC-encrypted (AES-CTR, sample entry encv with sinf/tenc), as a DRM packager writes it. ffmpeg
// demuxes it as if it were clear, so its "frames" are ciphertext.
func MakeEncryptedVideo(t testing.TB, dir, name string, seconds float64) string {
	t.Helper()
	out := filepath.Join(dir, name)
	dur := strconv.FormatFloat(seconds, 'f', -1, 64)
	runTool(t, "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-y",
		"-f", "lavfi", "-i", "testsrc2=s=320x240:r=10:d="+dur,
		"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
		"-encryption_scheme", "cenc-aes-ctr",
		"-encryption_key", "00112233445566778899aabbccddeeff",
		"-encryption_kid", "ffeeddccbbaa99887766554433221100",
		"-f", "mp4", out)
	return out
}

// MakeFragmentedVideo writes dir/name: a fragmented 320×240 H.264 MP4 (empty moov, a fragment per
// second) of seconds seconds whose movie header and movie extends header (mehd, inserted into mvex)
// declare declared; ffprobe reports the declaration as the file's duration. declared 0 leaves the
// file as ffmpeg wrote it (no mehd, no duration in the movie header).
func MakeFragmentedVideo(t testing.TB, dir, name string, seconds float64, declared time.Duration) string {
	t.Helper()
	out := filepath.Join(dir, name)
	dur := strconv.FormatFloat(seconds, 'f', -1, 64)
	runTool(t, "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-y",
		"-f", "lavfi", "-i", "testsrc2=s=320x240:r=10:d="+dur,
		"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-g", "10",
		"-movflags", "frag_keyframe+empty_moov+default_base_moof", "-f", "mp4", out)
	if declared == 0 {
		return out
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ms, me := mp4Box(t, data, 0, len(data), "moov")
	vs, _ := mp4Box(t, data, ms, me, "mvex")
	hs, _ := mp4Box(t, data, ms, me, "mvhd")
	timescale := binary.BigEndian.Uint32(data[hs+12:]) // a version 0 mvhd: ffmpeg writes one
	mehd := make([]byte, 16)
	binary.BigEndian.PutUint32(mehd[0:], 16)
	copy(mehd[4:], "mehd")
	units := uint32(declared.Seconds() * float64(timescale))
	binary.BigEndian.PutUint32(mehd[12:], units)
	binary.BigEndian.PutUint32(data[hs+16:], units) // the movie header declares it too, as live recorders write
	// And the video track's media header, in its own timescale.
	ts, te := mp4Box(t, data, ms, me, "trak")
	ds, de := mp4Box(t, data, ts, te, "mdia")
	mh, _ := mp4Box(t, data, ds, de, "mdhd")
	binary.BigEndian.PutUint32(data[mh+16:], uint32(declared.Seconds()*float64(binary.BigEndian.Uint32(data[mh+12:]))))
	patched := append(append(append([]byte{}, data[:vs]...), mehd...), data[vs:]...)
	// The boxes that hold it grow by its size; the fragments after moov address their data from
	// their own moof (default_base_moof), so moving them changes nothing.
	for _, start := range []int{vs, ms} {
		binary.BigEndian.PutUint32(patched[start-8:], binary.BigEndian.Uint32(patched[start-8:])+16)
	}
	if err := os.WriteFile(out, patched, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// MakeInitSegment writes dir/name: the init segment of a fragmented H.264 MP4 (its ftyp and moov),
// without a single media segment: a video track that holds no frame.
func MakeInitSegment(t testing.TB, dir, name string) string {
	t.Helper()
	full := MakeFragmentedVideo(t, dir, name, 2, 0)
	data, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	_, me := mp4Box(t, data, 0, len(data), "moov")
	if err := os.WriteFile(full, data[:me], 0o644); err != nil {
		t.Fatal(err)
	}
	return full
}

// MakeEncryptedWebM writes dir/name: a 320×240 VP9 WebM of seconds seconds whose video track
// header declares WebM's Common Encryption (ContentEncodings → ContentEncoding of type 1 with a
// ContentEncryption: AES-CTR and a key ID), as a packager writes it; the frames themselves are left
// clear, so ffprobe reads the file as any WebM. It is rewritten as a live WebM (a segment of
// unknown size, without the seek head and cues whose offsets the longer track header would move).
func MakeEncryptedWebM(t testing.TB, dir, name string, seconds float64) string {
	t.Helper()
	src := MakeVideo(t, t.TempDir(), "clear.webm", VideoOpts{Container: "webm", VCodec: "vp9", Seconds: seconds})
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	type element struct {
		id         []byte
		body       []byte
		start, end int
	}
	// read returns the element at off in b.
	read := func(b []byte, off int) element {
		idLen := ebmlVintLen(t, b[off])
		sizeLen := ebmlVintLen(t, b[off+idLen])
		size := uint64(b[off+idLen]) & (0xFF >> sizeLen)
		for _, c := range b[off+idLen+1 : off+idLen+sizeLen] {
			size = size<<8 | uint64(c)
		}
		bodyStart := off + idLen + sizeLen
		bodyEnd := min(len(b), bodyStart+int(size))
		if size == (1<<(7*sizeLen))-1 { // unknown size
			bodyEnd = len(b)
		}
		return element{id: b[off : off+idLen], body: b[bodyStart:bodyEnd], start: off, end: bodyEnd}
	}
	encode := func(id []byte, body []byte) []byte {
		out := append([]byte{}, id...)
		out = append(out, 0x01)
		for i := 6; i >= 0; i-- {
			out = append(out, byte(uint64(len(body))>>(8*i)))
		}
		return append(out, body...)
	}
	uint1 := func(id []byte, v byte) []byte { return encode(id, []byte{v}) }
	encryption := encode([]byte{0x50, 0x35}, append(append(
		uint1([]byte{0x47, 0xE1}, 5),                               // ContentEncAlgo: AES
		encode([]byte{0x47, 0xE2}, []byte("0123456789abcdef"))...), // ContentEncKeyID
		encode([]byte{0x47, 0xE7}, uint1([]byte{0x47, 0xE8}, 1))...)) // AES settings: CTR
	encoding := encode([]byte{0x62, 0x40}, append(append(append(
		uint1([]byte{0x50, 0x31}, 0),     // ContentEncodingOrder
		uint1([]byte{0x50, 0x32}, 1)...), // ContentEncodingScope: the frames
		uint1([]byte{0x50, 0x33}, 1)...), // ContentEncodingType: encryption
		encryption...))
	encodings := encode([]byte{0x6D, 0x80}, encoding)

	header := read(data, 0)
	segment := read(data, header.end)
	out := append([]byte{}, data[:header.end]...)
	out = append(out, segment.id...)
	out = append(out, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF) // unknown size
	seg := segment.body
	for off := 0; off < len(seg); {
		e := read(seg, off)
		switch string(e.id) {
		case "\x11\x4D\x9B\x74", "\x1C\x53\xBB\x6B": // SeekHead, Cues: offsets that would be wrong
		case "\x16\x54\xAE\x6B": // Tracks: the video track entry declares the encryption
			var tracks []byte
			for o := 0; o < len(e.body); {
				te := read(e.body, o)
				if string(te.id) == "\xAE" {
					tracks = append(tracks, encode(te.id, append(append([]byte{}, te.body...), encodings...))...)
				} else {
					tracks = append(tracks, e.body[te.start:te.end]...)
				}
				o = te.end
			}
			out = append(out, encode(e.id, tracks)...)
		default:
			out = append(out, seg[e.start:e.end]...)
		}
		off = e.end
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func ebmlVintLen(t testing.TB, b byte) int {
	t.Helper()
	for i := range 8 {
		if b&(0x80>>i) != 0 {
			return i + 1
		}
	}
	t.Fatalf("MakeEncryptedWebM: %#x starts no EBML number", b)
	return 0
}

// MakeScrambledTS writes dir/name: a 320×240 H.264 MPEG-TS of seconds seconds whose video and audio
// packets are marked scrambled (transport_scrambling_control 10, "even key"), as a DVB recording of a
// scrambled channel is; the tables (PAT, PMT, SDT) stay clear, as they are on air. The payload itself
// is left clear, so ffprobe reads the streams as any transport stream.
func MakeScrambledTS(t testing.TB, dir, name string, seconds float64) string {
	t.Helper()
	src := MakeVideo(t, t.TempDir(), "clear.ts", VideoOpts{Container: "mpegts", ACodec: "aac", Seconds: seconds})
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off+188 <= len(data); off += 188 {
		if data[off] != 0x47 {
			t.Fatalf("MakeScrambledTS: lost sync at %d", off)
		}
		pid := int(data[off+1]&0x1F)<<8 | int(data[off+2])
		if pid >= 0x100 && pid != 0x1FFF { // ffmpeg's elementary streams; not the tables or null packets
			data[off+3] = data[off+3]&0x3F | 0x80
		}
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
