package transcoder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// The poster: a JPEG of one frame from the first part of the video, at most posterMaxSide on its long
// edge, chosen among a few candidates so that a fade-in, a black or one-colour opening, or a frame
// blurred by motion or by a camera still finding its focus, does not stand for the whole video.
//
// The candidates are the first frames at or after posterCandidates evenly spaced times (posterPlan),
// from where the poster used to be taken (10% in, at most 1 s) to the middle of the video (at most
// posterWindow in). The poster is the earliest candidate that is usable (lookAt: not black, not flat,
// not blurred), so a video that opens on a good frame gets the same poster as before; when none is,
// the one with the most detail.
//
// Cost. An encode decodes every frame anyway: its poster branch selects the candidates from them and
// writes each as a JPEG and its luma plane as a PGM (a copy), which the worker reads to look at the
// frame, the next one only when that one is unusable. A remux decodes nothing: its poster run decodes
// up to the first candidate as before, and only when that one is unusable does a second run decode on
// to the others. On a 10 s 1080p H.264 clip (2-core VM, ffmpeg 5.1; BenchmarkVideoPosterCPU): the
// encode's poster output went from about 25 ms of CPU (one frame) to about 65 (five), well under 1%
// of the encode's 10 s; looking at a candidate costs the worker 2 to 4 ms (decoding the JPEG in Go took
// 12 to 30); the run beside a remux costs what it did, about 240 ms, most of it starting ffmpeg and
// decoding up to the first candidate, and about 540 ms when a 3 s black opening makes it go on.

// jpegSize reads the width and height from a JPEG's header (the poster's, for the response).
func jpegSize(path string) (int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	c, err := jpeg.DecodeConfig(f)
	if err != nil {
		return 0, 0, err
	}
	return c.Width, c.Height, nil
}

const (
	// posterCandidates is how many frames the poster is chosen from.
	posterCandidates = 5
	// posterWindow is how far into a video the last candidate is at most: its opening, which the
	// poster stands for. A video that does not say how long it is gets candidates up to
	// posterWindowUnknown, most such files being short recordings.
	posterWindow        = 15.0
	posterWindowUnknown = 4.0
	// posterPattern names the candidates (image2's numbering, from 1) in the job's directory; the
	// chosen one is renamed posterName, the others removed. lumaPattern names their luma planes.
	posterPattern = "poster-%d.jpg"
	lumaPattern   = "poster-%d.pgm"
)

// posterPlan is where the poster's candidates are: candidate i is the first frame at or after
// first + i×step seconds from the start of the content.
type posterPlan struct {
	first, step float64
}

// planPoster places the candidates of a video that lasts duration seconds (0: unknown): the first
// where the poster used to be, 10% into the video or 1 s, whichever is earlier (past a fade-in,
// before the content moves on; 0 when the length is unknown), the last at half the video, at most
// posterWindow in.
func planPoster(duration float64) posterPlan {
	first, last := 0.0, posterWindowUnknown
	if duration > 0 {
		first, last = math.Min(0.1*duration, 1), math.Min(duration/2, posterWindow)
	}
	return posterPlan{first: first, step: math.Max(last-first, 0) / (posterCandidates - 1)}
}

// at is candidate i's time.
func (pl posterPlan) at(i int) float64 { return pl.first + float64(i)*pl.step }

// selectFrom is the select filter that passes the candidates from i on, for frames whose timestamps
// count from offset seconds: each threshold is passed by the first frame at or after it (selected_n
// counts the frames passed so far). Quoted for a filter graph.
func (pl posterPlan) selectFrom(i int, offset float64) string {
	return fmt.Sprintf("select='gte(t,%.3f+selected_n*%.3f)'", pl.at(i)-offset, pl.step)
}

// candidatePath is candidate i's file in dir; lumaPath its luma plane's.
func candidatePath(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf(posterPattern, i+1))
}

func lumaPath(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf(lumaPattern, i+1))
}

// removeCandidates removes the candidates and their luma planes from dir; removePosterFiles the
// poster too.
func removeCandidates(dir string) {
	for i := range posterCandidates {
		os.Remove(candidatePath(dir, i))
		os.Remove(lumaPath(dir, i))
	}
}

func removePosterFiles(dir string) {
	os.Remove(filepath.Join(dir, posterName))
	removeCandidates(dir)
}

// posterMaxSide caps the poster's long edge, landscape or portrait: a 1080p video's poster is
// 1280×720 (720×1280 upright), a smaller one keeps its size. The poster is the video's thumbnail: it
// is shown in lists and previews and stands in the player's frame only until playback starts, and at
// this size (the largest of YouTube's standard thumbnails, about Open Graph's 1200×630) its JPEG is
// about half of a 1080p one. (It capped the width alone, so a portrait 1080p video's was 1080×1920.)
const posterMaxSide = 1280

// candidatesGraph is the filter graph's part that makes the candidates of the frames at in (a link
// label, "[0:1]", or a filter chain's end), passed through sel (a select filter, or "" for all):
// each scaled to the poster's size, as a picture for the JPEG ([pjpeg]) and as its luma plane for
// lookAt ([pluma], copied out of the frame). The scale filter also converts the candidates alone to
// the JPEG's full-range YUV, also when it changes no size: without it the graph negotiates that format
// back up to its input, and every frame was converted, the encode's too (on a 10 s 1080p clip, 1.9 s
// more CPU than without a poster).
func candidatesGraph(in, sel string) string {
	if sel == "" {
		sel = "null"
	}
	return in + sel + fmt.Sprintf(",scale=w='if(gte(iw,ih),min(%d,iw),-2)':h='if(gte(iw,ih),-2,min(%d,ih))'", posterMaxSide, posterMaxSide) +
		",split=2[pjpeg][pl];[pl]extractplanes=y[pluma]"
}

// candidateOutputs are the outputs of candidatesGraph's frames: up to frames of them, numbered from
// number. Passed through as they come, not to a frame rate (which would repeat a candidate to fill
// the time to the next); one encoder thread each (mjpeg's frame threads would each allocate a
// context); named relative to the run's directory, the job's, so that a '%' in its path cannot read as
// part of image2's pattern.
func candidateOutputs(frames, number int) []string {
	var args []string
	for _, o := range []struct{ label, codec, pattern string }{
		{"[pjpeg]", "mjpeg", posterPattern}, {"[pluma]", "pgm", lumaPattern}} {
		args = append(args, "-map", o.label, "-frames:v", strconv.Itoa(frames), "-fps_mode", "passthrough",
			"-c:v", o.codec, "-threads", "1")
		if o.codec == "mjpeg" {
			args = append(args, "-q:v", "3")
		}
		args = append(args, "-f", "image2", "-start_number", strconv.Itoa(number), "-y", "file:"+o.pattern)
	}
	return args
}

// choosePoster picks the poster among the candidate files in dir (those that exist: a video shorter
// than planned has fewer), renames it posterName and removes the others. It looks at the candidates
// in order and stops at the first usable one; without one, it takes the one with the most detail.
// It returns the poster's path and its candidate's time, or ok false when there is no candidate.
func choosePoster(dir string, pl posterPlan) (path string, at float64, ok bool, err error) {
	best, bestDetail := -1, -1.0
	var lookErr error
	for i := range posterCandidates {
		c := candidatePath(dir, i)
		if _, serr := os.Stat(c); serr != nil {
			continue
		}
		l, lerr := lookAtCandidate(dir, i)
		if lerr != nil {
			lookErr = lerr // an unreadable candidate is not chosen
			continue
		}
		if l.usable() {
			best = i
			break
		}
		if l.detail > bestDetail {
			best, bestDetail = i, l.detail
		}
	}
	if best < 0 {
		removeCandidates(dir)
		if lookErr != nil {
			return "", 0, false, fmt.Errorf("reading the poster's candidates: %w", lookErr)
		}
		return "", 0, false, nil
	}
	if path, err = keepCandidate(dir, best); err != nil {
		return "", 0, false, err
	}
	return path, pl.at(best), true, nil
}

// keepCandidate makes candidate i the poster and removes the other candidates.
func keepCandidate(dir string, i int) (string, error) {
	defer removeCandidates(dir)
	path := filepath.Join(dir, posterName)
	if err := os.Rename(candidatePath(dir, i), path); err != nil {
		return "", fmt.Errorf("keeping the chosen poster: %w", err)
	}
	return path, nil
}

// frameLook is what lookAt saw in a frame.
type frameLook struct {
	black, flat, blurred bool
	// detail ranks unusable frames: contrast (the luma's standard deviation) times sharpness.
	detail float64
}

func (l frameLook) usable() bool { return !l.black && !l.flat && !l.blurred }

// What makes a frame unusable as a poster, on its 8-bit full-range luma (the JPEG's).
// Calibrated on testsrc2, mandelbrot and SMPTE bars at 320×240 to 1920×1080, sharp and through
// Gaussian blurs: sharpness about 0.7 to 1.1 when sharp, 0.46 to 0.57 at σ = 1 px (soft camera
// footage), 0.22 to 0.32 at σ = 2 px, at most 0.23 from σ = 3 px and 0.20 for a picture enlarged
// four times.
const (
	// blackLuma and blackShare follow ffmpeg's blackframe filter: a frame with 98% of its pixels
	// below 32 is black (a fade, a dark title card).
	blackLuma  = 32
	blackShare = 0.98
	// flatDeviation: a frame whose luma varies less than this is one colour (a white flash, a
	// coloured title card, the grey middle of a fade).
	flatDeviation = 8
	// edgeGradient is the luma step (over two pixels, across and down) that makes a pixel part of an
	// edge; sharpness is measured on edges only, where blur shows, not on smooth areas (sky, walls).
	edgeGradient = 16
	// minSharpness is the least sharpness (the Laplacian's share of the gradient on edges: a sharp
	// edge bends within a pixel, a blurred one over many) of a usable frame; minEdgeShare the least
	// share of edge pixels (below, nothing in the frame is in focus).
	minSharpness = 0.25
	minEdgeShare = 0.0005
)

// lookAtCandidate looks at candidate i in dir: at its luma plane, or, should that be missing or
// unreadable, at its JPEG.
func lookAtCandidate(dir string, i int) (frameLook, error) {
	if pix, w, h, err := readPGM(lumaPath(dir, i)); err == nil {
		return lookAtLuma(pix, w, w, h), nil
	}
	return lookAt(candidatePath(dir, i))
}

// readPGM reads an 8-bit binary PGM as ffmpeg's pgm encoder writes it: "P5\n<w> <h>\n255\n", then
// the plane.
func readPGM(path string) (pix []uint8, w, h int, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, 0, err
	}
	rest, ok := bytes.CutPrefix(data, []byte("P5\n"))
	var fields [3]int
	for i := 0; ok && i < len(fields); i++ {
		sep := byte(' ')
		if i > 0 {
			sep = '\n'
		}
		var field []byte
		if field, rest, ok = bytes.Cut(rest, []byte{sep}); ok {
			fields[i], err = strconv.Atoi(string(field))
			ok = err == nil && len(field) <= 6
		}
	}
	w, h = fields[0], fields[1]
	if !ok || fields[2] != 255 || w <= 0 || h <= 0 || len(rest) != w*h {
		return nil, 0, 0, fmt.Errorf("reading %s: not an 8-bit plane as ffmpeg writes it", filepath.Base(path))
	}
	return rest, w, h, nil
}

// lookAt decodes the JPEG at path and tells whether its frame is black, flat or blurred.
func lookAt(path string) (frameLook, error) {
	f, err := os.Open(path)
	if err != nil {
		return frameLook{}, err
	}
	defer f.Close()
	img, err := jpeg.Decode(f)
	if err != nil {
		return frameLook{}, err
	}
	var (
		pix    []uint8
		stride int
		b      = img.Bounds()
	)
	switch m := img.(type) {
	case *image.YCbCr:
		pix, stride = m.Y, m.YStride
	case *image.Gray:
		pix, stride = m.Pix, m.Stride
	default: // not what ffmpeg's MJPEG encoder writes; read it the slow way
		g := image.NewGray(b)
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				g.Set(x, y, img.At(x, y))
			}
		}
		pix, stride = g.Pix, g.Stride
	}
	return lookAtLuma(pix, stride, b.Dx(), b.Dy()), nil
}

// lookAtLuma is lookAt on a luma plane of w×h pixels, rows stride bytes apart. Every second row is
// enough for the statistics and halves the time (about 4 ms at 1080p).
func lookAtLuma(pix []uint8, stride, w, h int) frameLook {
	if w < 3 || h < 3 {
		return frameLook{blurred: true} // too small to tell; usable as a last resort
	}
	var (
		n, dark, edges    int
		sum, sumSq        int64
		edgeLap, edgeGrad int64
	)
	for y := 1; y < h-1; y += 2 {
		up, row, down := pix[(y-1)*stride:][:w], pix[y*stride:][:w], pix[(y+1)*stride:][:w]
		for x := 1; x < w-1; x++ {
			c := int(row[x])
			n++
			sum += int64(c)
			sumSq += int64(c * c)
			if c < blackLuma {
				dark++
			}
			l, r, u, d := int(row[x-1]), int(row[x+1]), int(up[x]), int(down[x])
			if g := absInt(r-l) + absInt(d-u); g >= edgeGradient {
				edges++
				edgeGrad += int64(g)
				edgeLap += int64(absInt(4*c - l - r - u - d))
			}
		}
	}
	mean := float64(sum) / float64(n)
	deviation := math.Sqrt(math.Max(float64(sumSq)/float64(n)-mean*mean, 0))
	sharpness := 0.0
	if edgeGrad > 0 {
		sharpness = float64(edgeLap) / float64(edgeGrad)
	}
	return frameLook{
		black:   float64(dark) >= blackShare*float64(n),
		flat:    deviation < flatDeviation,
		blurred: sharpness < minSharpness || float64(edges) < minEdgeShare*float64(n),
		detail:  deviation * sharpness,
	}
}

func absInt(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// poster writes outDir/poster.jpg from video stream `stream` of file (-1: the first video stream;
// the file is the MP4 we wrote, or an upload whose streams we copy: upright either way) and returns
// its path and its candidate's time. The first run decodes up to the first candidate (seeking in
// the input to the key frame before it), falling back to the first frame; only when that frame is
// unusable does a second run decode on to the other candidates.
//
// Only reference frames are decoded on the way (-skip_frame noref): nothing refers to the others, so
// skipping them changes no frame that is decoded, and a candidate is at most a B-frame run (a few
// hundredths of a second) later than its time. In a stream with B-frames (x264's defaults, cameras'
// high profile) they are most of the frames, and this run's CPU time fell by a fifth on such a 1080p
// clip; a stream without them (many phones' encoders) decodes as before. After a remux the poster
// runs beside the copy and was the longer of the two. Should a stream mark every frame
// non-reference, the fallback decodes everything.
func (v *Videos) poster(ctx context.Context, file string, stream int, pl posterPlan, outDir string) (string, float64, error) {
	removePosterFiles(outDir)
	streamSpec := "0:v:0"
	if stream >= 0 {
		streamSpec = fmt.Sprintf("0:%d", stream)
	}
	// One decoder thread: the run outputs a frame or a few, which frame threads only delay (each
	// thread sets up its own context and frames are handed between them), and after a remux it
	// shares the cores with the copy beside it. 1080p H.264: 12-18 % less CPU per poster run (perf
	// stat), and the remux + poster pair finished sooner.
	run := func(seek float64, refsOnly bool, sel string, frames, number int) error {
		args := []string{"-nostdin", "-hide_banner", "-nostats", "-loglevel", "error",
			"-max_alloc", strconv.Itoa(maxAllocBytes), "-threads", "1",
			"-protocol_whitelist", "file", "-format_whitelist", inputFormats}
		if refsOnly {
			args = append(args, "-skip_frame", "noref")
		}
		if seek > 0 {
			// -ss before -i seeks in the input (to the keyframe before, then decodes up to it); the
			// frames' timestamps then count from the seek.
			args = append(args, "-ss", strconv.FormatFloat(seek, 'f', 3, 64))
		}
		args = append(args, "-i", "file:"+file, "-filter_complex", candidatesGraph("["+streamSpec+"]", sel))
		args = append(args, candidateOutputs(frames, number)...)
		return v.tools.run(ctx, outDir, v.tools.ffmpeg, args, nil, min(probeCPUTime, v.cfg.MaxCPUTime))
	}
	var err error
	first, fellBack := false, false
	for i, try := range []struct {
		seek     float64
		refsOnly bool
	}{{pl.at(0), true}, {0, false}} {
		if err = run(try.seek, try.refsOnly, "", 1, 1); err == nil {
			if st, serr := os.Stat(candidatePath(outDir, 0)); serr == nil && st.Size() > 0 {
				first, fellBack = true, i > 0
				break
			}
			err = errors.New("ffmpeg wrote no frame")
		}
		if ctx.Err() != nil {
			break
		}
	}
	if !first {
		removePosterFiles(outDir)
		return "", 0, fmt.Errorf("making poster: %w", err)
	}
	at := pl.at(0)
	if fellBack {
		at = 0
	}
	if l, lerr := lookAtCandidate(outDir, 0); (lerr == nil && l.usable()) || fellBack || pl.step <= 0 {
		// The first frame will do, or there is no other to take (an unreadable one is refused by
		// jpegSize as before).
		path, err := keepCandidate(outDir, 0)
		if err != nil {
			return "", 0, fmt.Errorf("making poster: %w", err)
		}
		return path, at, nil
	}
	// The other candidates, in one run from the second: whatever it writes is looked at with the
	// first; should it fail, the first is still there.
	_ = run(pl.at(1), true, pl.selectFrom(1, pl.at(1)), posterCandidates-1, 2)
	if ctx.Err() != nil {
		removePosterFiles(outDir)
		return "", 0, fmt.Errorf("making poster: %w", ctx.Err())
	}
	path, at, ok, err := choosePoster(outDir, pl)
	switch {
	case err != nil:
		return "", 0, fmt.Errorf("making poster: %w", err)
	case !ok:
		return "", 0, errors.New("making poster: ffmpeg wrote no frame")
	}
	return path, at, nil
}
