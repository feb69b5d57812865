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
