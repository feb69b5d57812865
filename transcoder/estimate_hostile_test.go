package transcoder_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// estimatePeakChildEnv, when set to a path, makes TestEstimateCannotBeTalkedDown the child that
// transforms that file with the default recipe and reports its peak memory.
const estimatePeakChildEnv = "MW_ESTIMATE_PEAK_CHILD"

// Issue 31 item 6: the memory budget admits a job by its estimate, so a file built to be estimated
// low must not get in cheap. Each crafted header below is estimated from the file and then
// transformed in a process of its own, whose peak resident memory (VmHWM) is measured: the estimate
// must be at least 1/1.5 of that peak. Before, a progressive JPEG behind 1001 DQT segments (past the
// estimator's walk) was counted baseline: 48 MiB for a 363 MiB decode.
func TestEstimateCannotBeTalkedDown(t *testing.T) {
	if path := os.Getenv(estimatePeakChildEnv); path != "" {
		estimatePeakChild(t, path)
		return
	}
	dir := t.TempDir()
	im := newImages(t, transcoder.DefaultImageConfig())
	prog := progressiveJPEG(t, dir, 7000, 7000)
	data, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dqt := append([]byte{0x00}, bytes.Repeat([]byte{1}, 64)...) // table 0, all ones: valid, overridden later
	dht := append([]byte{0x00, 1}, make([]byte, 15)...)         // DC table 0: one 1-bit code
	dht = append(dht, 0)
	for _, tc := range []struct {
		name string
		data []byte
		// floor is the least the transform's peak must rise by when it decodes the picture as built (or
		// the measurement sees nothing); 0 for a file refused at its header, or one that streams.
		floor int64
	}{
		{"progressive 7000×7000, 1001 DQT segments before its frame", afterSOI(data, segments(0xDB, dqt, 1001)), 100 << 20},
		{"progressive 7000×7000, 5000 DHT segments before its frame", afterSOI(data, segments(0xC4, dht, 5000)), 100 << 20},
		{"progressive 7000×7000, 13 MiB of APP15 before its frame", afterSOI(data, segments(0xEF, make([]byte, 65533), 200)), 100 << 20},
		{"progressive 7000×7000, bytes libjpeg skips before its frame", afterSOI(data, []byte("\x00\x11\x22\x33 extraneous")), 100 << 20},
		{"sequential 7000×7000, each component in a scan of its own", nonInterleavedJPEG(7000, 7000), 100 << 20},
		// libheif decodes above 8 bits to 16-bit samples: twice the 8-bit picture.
		{"HEIC 4000×3000, 10-bit samples", read(blackImage(t, dir, "deep.heic", 4000, 3000, "ushort", "heifsave", "--bitdepth", "10", "--compression", "hevc", "--effort", "0")), 100 << 20},
		{"truncated before its frame header", append([]byte{0xFF, 0xD8}, segments(0xDB, dqt, 20)...), 0},
		// TIFF is counted whole, at 8 bytes a sample when its depth cannot be read (a BigTIFF); these
		// stream through their strips or tiles, so their peaks are lower.
		{"BigTIFF 4000×4000, 16-bit samples", read(blackImage(t, dir, "big.tif", 4000, 4000, "ushort", "tiffsave", "--bigtiff")), 0},
		{"TIFF 4000×4000, 32-bit float samples in 1024 px tiles", read(blackImage(t, dir, "tiled.tif", 4000, 4000, "float", "tiffsave", "--tile", "--tile-width", "1024", "--tile-height", "1024")), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ext := ".jpg"
			switch {
			case strings.Contains(tc.name, "TIFF"):
				ext = ".tif"
			case strings.Contains(tc.name, "HEIC"):
				ext = ".heic"
			}
			path := filepath.Join(dir, strings.NewReplacer(" ", "_", "×", "x", ",", "").Replace(tc.name)+ext)
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			est := im.EstimateMemory(path, nil)
			peak, msg := estimatePeak(t, path)
			t.Logf("estimated %d MiB, peak %d MiB (%.2f×); transform: %q", est>>20, peak>>20, float64(peak)/float64(est), msg)
			if peak < tc.floor {
				t.Fatalf("the transform's peak rose by only %d MiB (%q): the file did not decode as built", peak>>20, msg)
			}
			if float64(est) < float64(peak)/1.5 {
				t.Errorf("estimated at %d MiB, the transform peaked at %d MiB: under 1/1.5 of its peak", est>>20, peak>>20)
			}
		})
	}
}

// progressiveJPEG writes a w×h progressive JPEG at quality 95 (4:4:4, as libvips saves above 90).
func progressiveJPEG(t *testing.T, dir string, w, h int) string {
	t.Helper()
	return blackImage(t, dir, "progressive.jpg", w, h, "uchar", "jpegsave", "--interlace", "--Q", "95")
}

// blackImage writes dir/name: a black w×h 3-band picture of the band format (uchar, ushort, float),
// saved by the vips saver with its options.
func blackImage(t *testing.T, dir, name string, w, h int, format, saver string, options ...string) string {
	t.Helper()
	vips := testenv.RequireBinary(t, "vips")
	black, cast, out := filepath.Join(dir, name+".black.v"), filepath.Join(dir, name+".v"), filepath.Join(dir, name)
	for _, args := range [][]string{
		{"black", black, strconv.Itoa(w), strconv.Itoa(h), "--bands", "3"},
		{"cast", black, cast, format},
		append([]string{saver, cast, out}, options...),
	} {
		if b, err := exec.Command(vips, args...).CombinedOutput(); err != nil {
			t.Fatalf("vips %v: %v\n%s", args, err, b)
		}
	}
	os.Remove(black)
	os.Remove(cast)
	return out
}

// segments is n marker segments of payload each.
func segments(marker byte, payload []byte, n int) []byte {
	seg := append([]byte{0xFF, marker, 0, 0}, payload...)
	binary.BigEndian.PutUint16(seg[2:4], uint16(len(payload)+2))
	return bytes.Repeat(seg, n)
}

// afterSOI is the JPEG data with extra between its SOI and the rest.
func afterSOI(data, extra []byte) []byte {
	out := append([]byte{}, data[:2]...)
	out = append(out, extra...)
	return append(out, data[2:]...)
}

// nonInterleavedJPEG builds a w×h baseline (SOF0) JPEG whose three components come in three scans,
// one each: libjpeg must then hold every component's coefficients until the last scan, as for a
// progressive file. Every block is all zeros, coded with one 1-bit code for the DC difference 0 and
// one for the end of block, so its entropy-coded data is zero bytes.
func nonInterleavedJPEG(w, h int) []byte {
	var b bytes.Buffer
	b.Write([]byte{0xFF, 0xD8})
	b.Write(segments(0xDB, append([]byte{0x00}, bytes.Repeat([]byte{1}, 64)...), 1))
	sof := []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 3, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0}
	b.Write(segments(0xC0, sof, 1))
	one := append([]byte{1}, make([]byte, 15)...) // one code of length 1
	dht := append(append([]byte{0x00}, one...), 0x00)
	dht = append(append(append(dht, 0x10), one...), 0x00) // AC table 0: the code is EOB
	b.Write(segments(0xC4, dht, 1))
	blocks := ((w + 7) / 8) * ((h + 7) / 8)
	for c := byte(1); c <= 3; c++ {
		b.Write(segments(0xDA, []byte{1, c, 0x00, 0, 63, 0}, 1))
		b.Write(make([]byte, (2*blocks+7)/8))
	}
	b.Write([]byte{0xFF, 0xD9})
	return b.Bytes()
}

// estimatePeak runs this test binary as the child on path and returns by how much its peak resident
// memory (VmHWM) rose during the transform, and the transform's error ("" for none).
func estimatePeak(t *testing.T, path string) (int64, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEstimateCannotBeTalkedDown$", "-test.count=1")
	cmd.Env = append(os.Environ(), estimatePeakChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PEAK "); ok {
			var before, after int64
			var msg string
			if _, err := fmt.Sscanf(rest, "%d %d %q", &before, &after, &msg); err != nil {
				t.Fatalf("child's line %q: %v", sc.Text(), err)
			}
			return (after - before) << 10, msg
		}
	}
	t.Fatalf("child reported nothing:\n%s", out)
	return 0, ""
}

// estimatePeakChild is the child's side: libvips loaded first (its libraries are not the image's
// cost), then one transform with the default recipe between two readings of VmHWM.
func estimatePeakChild(t *testing.T, path string) {
	im := newImages(t, transcoder.DefaultImageConfig())
	if err := im.Preload(); err != nil {
		t.Fatal(err)
	}
	before := vmHWM(t)
	_, err := im.Transform(context.Background(), path, t.TempDir())
	after := vmHWM(t)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	fmt.Printf("PEAK %d %d %q\n", before, after, msg)
}
