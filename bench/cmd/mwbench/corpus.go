package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// corpusVersion names the cache directory; bump it when a maker or a parameter changes, so a stale
// cache is never measured.
const corpusVersion = "corpus-v1"

// Photo is one image of the corpus.
type Photo struct {
	Name   string // e.g. jpeg-12mp
	Format string // jpeg, png, heic
	W, H   int
	Path   string
}

// MP is the photo's size in megapixels.
func (p Photo) MP() float64 { return float64(p.W*p.H) / 1e6 }

// Clip is one video of the corpus.
type Clip struct {
	Name string // e.g. 1080p-h264.mp4
	Opts testenv.VideoOpts
	Path string
}

// Corpus is every input the benchmark uses, generated once into the cache.
type Corpus struct {
	Dir    string
	Photos []Photo // photo-like: testsrc2 with grain
	Small  Photo   // for the many-jobs RSS run
	Clips  []Clip
	Large  string // uncompressed 1080p MOV of about the requested size
	Scan   string // 100 MiB of incompressible bytes
	// LargeFrames is the frame count of Large (largeFrameBytes each).
	LargeFrames int
}

// clipSeconds is the length of every clip: issue 37 judges the worker's video jobs against the bare
// commands on clips of at least 10 s (at 6 s, ffprobe's start-up alone was 5 % of a transcode), and
// longer ones would stretch the videos phase (6 clips × 3 runs × worker, fuzzy-hash worker and bare
// replays) on 2 cores. The clips live in the cache under clips-<seconds>s/, so changing it makes new
// ones without remaking the photos.
const clipSeconds = 10

// largeFrameBytes is one frame of the large input: 1080p raw 4:2:2, 2 bytes a pixel.
const largeFrameBytes = 1920 * 1080 * 2

func corpusSpec(dir string, largeMiB int) Corpus {
	c := Corpus{Dir: dir}
	for _, p := range []struct {
		format string
		w, h   int
	}{
		{"jpeg", 4000, 3000}, {"jpeg", 6000, 4000},
		{"png", 4000, 3000}, {"png", 6000, 4000},
		{"heic", 4000, 3000}, {"heic", 6000, 4000},
	} {
		c.Photos = append(c.Photos, Photo{Name: fmt.Sprintf("%s-%dmp", p.format, p.w*p.h/1_000_000),
			Format: p.format, W: p.w, H: p.h})
	}
	c.Small = Photo{Name: "jpeg-0.3mp", Format: "jpeg", W: 640, H: 480}
	for _, res := range []struct {
		name string
		w, h int
	}{{"720p", 1280, 720}, {"1080p", 1920, 1080}} {
		for _, v := range []struct {
			codec, audio, container, ext string
		}{{"h264", "aac", "mp4", "mp4"}, {"hevc", "aac", "mov", "mov"}, {"vp9", "opus", "webm", "webm"}} {
			c.Clips = append(c.Clips, Clip{
				Name: fmt.Sprintf("%s-%s.%s", res.name, v.codec, v.ext),
				Opts: testenv.VideoOpts{Width: res.w, Height: res.h, Seconds: clipSeconds, FPS: 25,
					VCodec: v.codec, ACodec: v.audio, Container: v.container, FastStart: v.container == "mp4"},
			})
		}
	}
	c.LargeFrames = int((int64(largeMiB) << 20) / largeFrameBytes)
	return c
}

// ensureCorpus makes whatever is missing from the cache. Each file is made in a temp dir and renamed
// into place, so an interrupted run never leaves a half-written file that looks complete.
func ensureCorpus(env *bench.Env, cacheRoot string, largeMiB int, logf func(string, ...any)) (Corpus, error) {
	dir := filepath.Join(cacheRoot, corpusVersion)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Corpus{}, err
	}
	c := corpusSpec(dir, largeMiB)
	var err error
	make1 := func(name string, gen func(tmp string) string) string {
		if err != nil {
			return ""
		}
		final := filepath.Join(dir, name)
		if _, serr := os.Stat(final); serr == nil {
			return final
		}
		logf("corpus: making %s", name)
		err = env.Do(func() {
			tmp := env.TempDir()
			made := gen(tmp)
			if rerr := os.Rename(made, final); rerr != nil {
				env.Fatalf("moving %s into the cache: %v", made, rerr)
			}
		})
		return final
	}
	photoExt := map[string]string{"jpeg": "jpg", "png": "png", "heic": "heic"}
	for i, p := range c.Photos {
		c.Photos[i].Path = make1(p.Name+"."+photoExt[p.Format], func(tmp string) string {
			return testenv.MakePhoto(env, tmp, p.Format, p.W, p.H)
		})
	}
	c.Small.Path = make1(c.Small.Name+".jpg", func(tmp string) string {
		return testenv.MakeJPEG(env, tmp, c.Small.W, c.Small.H)
	})
	clipDir := fmt.Sprintf("clips-%ds", clipSeconds)
	if err := os.MkdirAll(filepath.Join(dir, clipDir), 0o755); err != nil {
		return Corpus{}, err
	}
	for i, cl := range c.Clips {
		c.Clips[i].Path = make1(filepath.Join(clipDir, cl.Name), func(tmp string) string {
			return testenv.MakeVideo(env, tmp, cl.Name, cl.Opts)
		})
	}
	c.Large = make1(fmt.Sprintf("large-1080p-uyvy-%dframes.mov", c.LargeFrames), func(tmp string) string {
		return testenv.MakeRawVideo(env, tmp, "large.mov", 1920, 1080, c.LargeFrames)
	})
	c.Scan = make1("scan-100mib.bin", func(tmp string) string {
		return testenv.MakeRandomFile(env, filepath.Join(tmp, "scan.bin"), 100<<20)
	})
	return c, err
}

func (c Corpus) photo(name string) Photo {
	for _, p := range c.Photos {
		if p.Name == name {
			return p
		}
	}
	panic("no photo " + name)
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
