package transcoder

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// The box readers (MP4, HEIF, Matroska, MPEG-TS headers) run on uploads before any tool does: damaged, cut and made-up boxes must give an
// answer, never a panic or an unbounded read. Real files, cut at every few bytes and with bytes
// flipped at random, go through both.
func TestBoxReadersTakeDamagedFiles(t *testing.T) {
	dir := t.TempDir()
	sources := []string{
		testenv.MakeFragmentedVideo(t, dir, "frag.mp4", 2, 0),
		testenv.MakeEncryptedVideo(t, dir, "enc.mp4", 1),
		testenv.MakeHEIC(t, dir, 64, 48),
		testenv.MakeEncryptedWebM(t, dir, "enc.webm", 1),
		testenv.MakeScrambledTS(t, dir, "scrambled.ts", 1),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	path := filepath.Join(dir, "damaged")
	for _, src := range sources {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 300 {
			b := append([]byte{}, data[:rng.IntN(len(data)+1)]...)
			if i%2 == 1 {
				for range 1 + rng.IntN(8) {
					if len(b) > 0 {
						b[rng.IntN(len(b))] = byte(rng.IntN(256))
					}
				}
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			readMP4Content(path)
			readHEIFPrimary(path)
			matroskaProtected(path)
			tsScrambled(path)
			HEIFUnsupported(b)
		}
	}
}

// A fragment's senc box marks its samples encrypted unless the index describes its track as clear:
// mp4ff's media segment alone (no index) is protected; a file mp4ff decrypted, its senc kept beside
// a clear avc1 entry, is not; its encrypted original is.
func TestMP4SencJudgedByTheTrack(t *testing.T) {
	dir := testenv.ModuleDir(t, "github.com/Eyevinn/mp4ff", "v0.47.0")
	for _, tc := range []struct {
		path      string
		protected bool
	}{
		{"mp4/testdata/moof_enc.m4s", true},
		{"mp4/testdata/prog_8s_enc_dashinit.mp4", true},
		{"examples/add-sidx/testdata/clear_with_enc_boxes.mp4", false},
		{"mp4/testdata/prog_8s_dec_dashinit.mp4", false},
	} {
		c, ok := readMP4Content(filepath.Join(dir, tc.path))
		if !ok || c.protected != tc.protected {
			t.Errorf("%s: read %v, protected %v, want %v", tc.path, ok, c.protected, tc.protected)
		}
	}
}
