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
