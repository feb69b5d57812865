package app_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/job"
)

// The real-world corpus: files other projects ship as test data (Go's image packages with PngSuite,
// golang.org/x/image, mimetype's and filetype's format samples, imaging's EXIF orientation set), plus
// device-like images and videos made here, run through the whole worker. Every file's expected outcome is in testdata/corpus.tsv; regenerate it with
// MW_CORPUS_RECORD=1 after a deliberate change, and read the diff.

const (
	corpusTable = "testdata/corpus.tsv"
	// Module versions whose zips carry the test data (mimetype dropped testdata/ from its module
	// zip after v1.4.3).
	xImageVersion  = "v0.47.0"
	mimetypeCorpus = "v1.4.3"
	// imaging ships its test images (the EXIF orientation set orientation_0..8.jpg among them),
	// filetype its format samples (old QuickTime, MP4, MKV, WebM, a 5 MB TIFF, documents).
	imagingCorpus  = "v1.6.2"
	filetypeCorpus = "v1.1.3"
)

// corpusFile is one file of the corpus: where it comes from and its path there.
type corpusFile struct {
	source, name, path string
}

func (f corpusFile) id() string { return f.source + "\t" + f.name }

// imageExt are the extensions of x/image's testdata that are images (the rest are fonts and
// compressed text for other packages).
var imageExt = []string{".png", ".jpeg", ".jpg", ".gif", ".webp", ".tiff", ".tif", ".bmp"}

// collectCorpus gathers the corpus at test time: Go's own testdata from GOROOT, the modules' through
// the module proxy (or cache), the device-like media made with ffmpeg and libvips.
func collectCorpus(t *testing.T) []corpusFile {
	t.Helper()
	var files []corpusFile
	walk := func(source, root string, keep func(rel string) bool) {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !d.Type().IsRegular() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if keep(rel) {
				files = append(files, corpusFile{source, filepath.ToSlash(rel), p})
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walking %s: %v", root, err)
		}
	}
	inTestdata := func(rel string) bool { return strings.Contains("/"+filepath.ToSlash(rel), "/testdata/") }
	walk("go", filepath.Join(runtime.GOROOT(), "src", "image"), inTestdata)
	walk("x/image", testenv.ModuleDir(t, "golang.org/x/image", xImageVersion), func(rel string) bool {
		return inTestdata(rel) && slices.Contains(imageExt, strings.ToLower(filepath.Ext(rel)))
	})
	walk("mimetype", filepath.Join(testenv.ModuleDir(t, "github.com/gabriel-vasile/mimetype", mimetypeCorpus), "testdata"),
		func(string) bool { return true })
	walk("imaging", filepath.Join(testenv.ModuleDir(t, "github.com/disintegration/imaging", imagingCorpus), "testdata"),
		func(string) bool { return true })
	walk("filetype", filepath.Join(testenv.ModuleDir(t, "github.com/h2non/filetype", filetypeCorpus), "fixtures"),
		func(string) bool { return true })

	gen := t.TempDir()
	for name, path := range map[string]string{
		"avif-still.avif":           testenv.MakeAVIF(t, gen, 1600, 1200),
		"avif-sequence.avif":        testenv.MakeAVIFSequence(t, gen, 320, 240, 10),
		"animated.gif":              testenv.MakeGIF(t, gen, 480, 270, 12),
		"animated.webp":             testenv.MakeAnimatedWebP(t, gen, 480, 270, 12),
		"animated-over-budget.gif":  testenv.MakeGIFFrames(t, gen, 16, 16, 400),
		"animated.png":              testenv.MakeAPNG(t, gen, 320, 240, 10),
		"phone-portrait-exif-6.jpg": testenv.MakeJPEGOrientation(t, gen, 1600, 1200, 6),
		"heic-photo.heic":           testenv.MakeHEIC(t, gen, 1600, 1200),
		// Device videos: a portrait HLG phone clip (rotation matrix), HDR10 PQ, a screen recorder's
		// VP9/Opus MKV, an old camera's MPEG-4/MP3 AVI, a camcorder's H.264/AC-3 MTS, a voice memo
		// (audio alone: refused). devices_test.go checks what each of them comes out as.
		"phone-hlg-portrait.mov": testenv.MakePhoneHLG(t, gen),
		"hdr10-pq.mp4":           testenv.MakePQClip(t, gen),
		"screen-vp9-opus.mkv":    testenv.MakeScreenMKV(t, gen),
		"camera-mpeg4-mp3.avi":   testenv.MakeCameraAVI(t, gen),
		"camcorder-h264-ac3.mts": testenv.MakeCamcorderMTS(t, gen),
		"voice-memo-aac.m4a":     testenv.MakeM4A(t, gen),
		// Uploads cut short, as flaky mobile connections leave them.
		"truncated-photo.jpg":  cutFile(t, testenv.MakeJPEG(t, t.TempDir(), 1600, 1200), 2),
		"truncated-photo.heic": cutFile(t, testenv.MakeHEIC(t, t.TempDir(), 1600, 1200), 2),
		"truncated.png":        cutFile(t, testenv.MakeAPNG(t, t.TempDir(), 320, 240, 10), 5),
	} {
		files = append(files, corpusFile{"generated", name, path})
	}
	slices.SortFunc(files, func(a, b corpusFile) int { return strings.Compare(a.id(), b.id()) })
	return files
}

// cutFile writes the first 1/n of src to a new file and returns its path.
func cutFile(t *testing.T, src string, n int) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "cut-"+filepath.Base(src))
	if err := os.WriteFile(p, data[:len(data)/n], 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// expectation is one row of the table: the outcome class and, for failures and warnings, the
// message a person gets.
type expectation struct {
	outcome string // "images 3", "animated 3", "still+warning 3", "video 2", "failed"
	detail  string // the error (failed) or the warning (still+warning); empty otherwise
}

func readCorpusTable(t *testing.T) map[string]expectation {
	t.Helper()
	f, err := os.Open(corpusTable)
	if err != nil {
		t.Fatalf("reading the corpus table: %v (record it with MW_CORPUS_RECORD=1)", err)
	}
	defer f.Close()
	want := map[string]expectation{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 4 {
			t.Fatalf("%s: %q has %d columns, want source, file, outcome, detail", corpusTable, line, len(cols))
		}
		want[cols[0]+"\t"+cols[1]] = expectation{cols[2], cols[3]}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return want
}

// classify turns a response into the table's terms. Every WebP variant is fetched from the URL the
// response gives and its RIFF structure checked against the response (canvas size, frame count);
// animated ones and every tenth still are decoded in full by libvips as well.
func classify(t *testing.T, r contracts.Response, decode bool) expectation {
	t.Helper()
	if !r.Success {
		return expectation{"failed", r.Error}
	}
	kind := "images"
	for _, v := range r.Processed {
		switch v.Format {
		case contracts.FormatMP4:
			kind = "video"
		case contracts.FormatWebP:
			path := downloadVariant(t, v.URL)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			w, h, frames, err := webpInfo(data)
			if err != nil || w != v.Width || h != v.Height || int64(len(data)) != v.Size {
				t.Errorf("%s: %dx%d, %d bytes (%v); the response says %dx%d, %d bytes", v.URL, w, h, len(data), err, v.Width, v.Height, v.Size)
			}
			if frames > 1 {
				kind = "animated"
			}
			if frames > 1 || (decode && v.Quality == contracts.QualityHigh) {
				info := testenv.DecodeImage(t, path)
				if n, _ := strconv.Atoi(info.Fields["n-pages"]); max(n, 1) != frames {
					t.Errorf("%s: libvips decodes %d pages, the file has %d frames", v.URL, n, frames)
				}
			}
		}
	}
	if len(r.Warnings) > 0 {
		return expectation{"still+warning " + strconv.Itoa(len(r.Processed)), strings.Join(r.Warnings, " | ")}
	}
	return expectation{kind + " " + strconv.Itoa(len(r.Processed)), ""}
}

// webpInfo reads a WebP's canvas size and frame count from its RIFF chunks (VP8X for extended and
// animated files, else the VP8 or VP8L bitstream header).
func webpInfo(data []byte) (w, h, frames int, err error) {
	if len(data) < 12 || string(data[0:4]) != "RIFF" || string(data[8:12]) != "WEBP" ||
		int(binary.LittleEndian.Uint32(data[4:8]))+8 != len(data) {
		return 0, 0, 0, errors.New("not a complete RIFF WEBP file")
	}
	for off := 12; off+8 <= len(data); {
		fourcc, size := string(data[off:off+4]), int(binary.LittleEndian.Uint32(data[off+4:off+8]))
		body := data[off+8 : min(off+8+size, len(data))]
		switch {
		case fourcc == "VP8X" && len(body) >= 10:
			w = 1 + (int(body[4]) | int(body[5])<<8 | int(body[6])<<16)
			h = 1 + (int(body[7]) | int(body[8])<<8 | int(body[9])<<16)
		case fourcc == "ANMF":
			frames++
		case fourcc == "VP8 " && len(body) >= 10:
			if w == 0 {
				w, h = int(binary.LittleEndian.Uint16(body[6:8])&0x3fff), int(binary.LittleEndian.Uint16(body[8:10])&0x3fff)
			}
			frames = max(frames, 1)
		case fourcc == "VP8L" && len(body) >= 5:
			if w == 0 {
				bits := binary.LittleEndian.Uint32(body[1:5])
				w, h = int(bits&0x3fff)+1, int(bits>>14&0x3fff)+1
			}
			frames = max(frames, 1)
		}
		off += 8 + size + size&1
	}
	if w == 0 || h == 0 || frames == 0 {
		return 0, 0, 0, errors.New("no image in the WebP file")
	}
	return w, h, frames, nil
}

// goroutinesFlat waits for the goroutines to fall back to what they were before the worker started.
// nats.go v1.55's jetstream publisher can leave one goroutine per JetStream context blocked for good
// in resetPendingAcksOnReconnect (it reads the status channel after Close has set it to nil); those
// are upstream's, bounded by the contexts (a handful), not by the jobs, and are counted separately.
func goroutinesFlat(t *testing.T, before int) {
	t.Helper()
	const upstreamBound = 10
	testenv.Eventually(t, 30*time.Second, func() error {
		buf := make([]byte, 1<<20)
		stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
		var ours []string
		upstream := 0
		for _, s := range stacks {
			if strings.Contains(s, "jetstream.(*jetStream).resetPendingAcksOnReconnect") {
				upstream++
				continue
			}
			ours = append(ours, s)
		}
		if len(ours) > before || upstream > upstreamBound {
			return fmt.Errorf("%d goroutines (and %d of nats.go's publisher, at most %d allowed) after the worker stopped, %d before it started:\n%s",
				len(ours), upstream, upstreamBound, before, strings.Join(ours, "\n\n"))
		}
		return nil
	})
}

// downloadVariant downloads a variant from the URL the response gives (the worker's /objects server).
func downloadVariant(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	p := filepath.Join(t.TempDir(), filepath.Base(url))
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRealWorldCorpus runs every corpus file through the worker at once (its image and video slots
// take them in turn) and checks each gets exactly one response, valid against the schema, of the
// outcome the table states, with messages free of scratch paths; and that the worker's goroutines
// are gone after it.
func TestRealWorldCorpus(t *testing.T) {
	files := collectCorpus(t)
	record := os.Getenv("MW_CORPUS_RECORD") != ""
	var want map[string]expectation
	if !record {
		want = readCorpusTable(t)
	}
	clamd := testenv.StartClamd(t)
	goroutines := runtime.NumGoroutine()

	got := map[string]expectation{}
	var (
		w   *world
		ids map[string]string
	)
	t.Run("worker", func(t *testing.T) {
		// clamd on its unix socket, as scripts/run.sh sets it up: every file is scanned in place (FILDES).
		w = startWorld(t, app.StorageNATS, clamd, func(c *app.Config) {
			c.PerLane[job.Image].Slots, c.PerLane[job.Video].Slots = 2, 1
			c.Scanner.Addr = clamd.SocketAddr
		})
		start := time.Now()
		ids = make(map[string]string, len(files))
		for i, f := range files {
			key := fmt.Sprintf("corpus/%04d/%s", i, filepath.Base(f.name))
			ids[f.id()] = w.request(w.upload(f.path, key))
		}
		responses := make(map[string]contracts.Response, len(files))
		for _, f := range files {
			responses[f.id()] = w.await(ids[f.id()], 5*time.Minute)
		}
		t.Logf("%d files through the worker in %s", len(files), time.Since(start).Round(time.Millisecond))
		for i, f := range files {
			r := responses[f.id()]
			e := classify(t, r, i%10 == 0)
			got[f.id()] = e
			for _, bad := range []string{w.cfg.Pipeline.TmpDir, os.TempDir() + "/", "without a message", "no reason"} {
				if strings.Contains(r.Error, bad) || slices.ContainsFunc(r.Warnings, func(s string) bool { return strings.Contains(s, bad) }) {
					t.Errorf("%s: message contains %q: %q %q", f.id(), bad, r.Error, r.Warnings)
				}
			}
		}
		t.Logf("responses classified in %s", time.Since(start).Round(time.Millisecond))
		checkOrientationSet(t, files, responses)
		scratchEmpty(t, w)
	})
	if record {
		writeCorpusTable(t, files, got)
	}
	// Exactly one response per file, counted once the worker has stopped (await only sees the
	// responses that are in when it is called), and none for anything else.
	if w != nil && len(ids) == len(files) {
		w.mu.Lock()
		for _, f := range files {
			if n := len(w.responses[ids[f.id()]]); n != 1 {
				t.Errorf("%s: %d responses, want exactly one", f.id(), n)
			}
		}
		if len(w.responses) != len(files) {
			t.Errorf("responses for %d mediaIds, %d files sent", len(w.responses), len(files))
		}
		w.mu.Unlock()
	}
	goroutinesFlat(t, goroutines)
	if record {
		return
	}
	counts := map[string]int{}
	for _, f := range files {
		g, ok := got[f.id()]
		if !ok {
			continue // the worker subtest failed first
		}
		counts[strings.Fields(g.outcome)[0]]++
		e, ok := want[f.id()]
		if !ok {
			t.Errorf("%s is not in %s: got %q %q (record the table again and review it)", f.id(), corpusTable, g.outcome, g.detail)
			continue
		}
		if g != e {
			t.Errorf("%s: got %q %q, want %q %q", f.id(), g.outcome, g.detail, e.outcome, e.detail)
		}
	}
	if len(want) != len(files) {
		t.Errorf("%s lists %d files, the corpus has %d", corpusTable, len(want), len(files))
	}
	t.Logf("outcomes: %v", counts)
}

// checkOrientationSet: imaging's orientation_1..8.jpg store one picture (an "F", 50×70 upright) in
// each of the eight EXIF orientations, orientation_0.jpg has none. Every high variant must show it
// upright: the size of orientation_0's, and black or white where its is, at four points that tell
// each rotation and mirroring apart.
func checkOrientationSet(t *testing.T, files []corpusFile, responses map[string]contracts.Response) {
	t.Helper()
	points := [][2]int{{12, 17}, {37, 17}, {12, 52}, {37, 52}}
	look := func(name string) (w, h int, lum []float64) {
		r := responses["imaging\t"+name]
		if !r.Success {
			t.Errorf("imaging %s: %s", name, r.Error)
			return 0, 0, nil
		}
		v := variant(t, r, contracts.QualityHigh)
		path := downloadVariant(t, v.URL)
		for _, p := range points {
			lum = append(lum, testenv.Pixel(t, path, p[0], p[1])[0])
		}
		return v.Width, v.Height, lum
	}
	if !slices.ContainsFunc(files, func(f corpusFile) bool { return f.id() == "imaging\torientation_8.jpg" }) {
		t.Fatal("imaging's orientation set is not in the corpus")
	}
	w0, h0, want := look("orientation_0.jpg")
	if w0 != 50 || h0 != 70 || want == nil || want[0] > 64 || want[3] < 192 {
		t.Fatalf("control: orientation_0.jpg's high variant is %dx%d with %v at %v, want an upright 50×70 F", w0, h0, want, points)
	}
	for o := 1; o <= 8; o++ {
		name := fmt.Sprintf("orientation_%d.jpg", o)
		w, h, got := look(name)
		if w != w0 || h != h0 || len(got) != len(want) {
			t.Errorf("%s: high variant %dx%d, want %dx%d upright", name, w, h, w0, h0)
			continue
		}
		for i := range got {
			if d := got[i] - want[i]; d > 64 || d < -64 {
				t.Errorf("%s: %v at %v, orientation_0.jpg has %v: not upright", name, got, points, want)
				break
			}
		}
	}
}

func writeCorpusTable(t *testing.T, files []corpusFile, got map[string]expectation) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# The expected outcome of every file of app's real-world corpus (corpus_test.go): source, file,\n")
	b.WriteString("# outcome (images N: N still WebPs; animated N: N animated WebPs; still+warning N: first frame\n")
	b.WriteString("# only, with the warning; video N: MP4 and poster; failed: the error a person reads), detail.\n")
	b.WriteString("# Sources: go = $(go env GOROOT)/src/image/**/testdata, x/image = golang.org/x/image@" + xImageVersion + "\n")
	b.WriteString("# testdata images, mimetype = github.com/gabriel-vasile/mimetype@" + mimetypeCorpus + "/testdata, imaging =\n")
	b.WriteString("# github.com/disintegration/imaging@" + imagingCorpus + "/testdata, filetype = github.com/h2non/filetype@" + filetypeCorpus + "/fixtures,\n")
	b.WriteString("# generated = made by the test. Written by MW_CORPUS_RECORD=1 go test -run TestRealWorldCorpus ./app; review every change.\n")
	for _, f := range files {
		e := got[f.id()]
		fmt.Fprintf(&b, "%s\t%s\t%s\n", f.id(), e.outcome, e.detail)
	}
	if err := os.WriteFile(corpusTable, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d files)", corpusTable, len(files))
}
