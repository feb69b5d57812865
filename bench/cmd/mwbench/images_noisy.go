package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// noisyCount is the size of issue 13's black-box case: eight different noisy 12 MP JPEGs in the
// store, two at a time.
const noisyCount = 8

// noisyPhotos makes (or finds in the corpus cache) the eight noisy 12 MP JPEGs: testsrc2 with
// Gaussian noise (testenv.NoisySource), a different seed each, so no two are the same file.
func (c Corpus) noisyPhotos(env *bench.Env, logf func(format string, args ...any)) ([]Photo, error) {
	var photos []Photo
	for i := range noisyCount {
		name := fmt.Sprintf("noisy-12mp-%d", i+1)
		path := filepath.Join(c.Dir, name+".jpg")
		if _, err := os.Stat(path); err != nil {
			logf("corpus: making %s", filepath.Base(path))
			if err := env.Do(func() {
				tmp := filepath.Join(env.TempDir(), "noisy.jpg")
				testenv.MakeNoisyJPEG(env, tmp, 4000, 3000, i+1)
				if err := os.Rename(tmp, path); err != nil {
					env.Fatalf("moving %s into the cache: %v", tmp, err)
				}
			}); err != nil {
				return nil, err
			}
		}
		photos = append(photos, Photo{Name: name, Format: "jpeg", W: 4000, H: 3000, Path: path})
	}
	return photos, nil
}
