package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mediaworker/mediaworker/bench"
)

// Capturing the worker's ffmpeg/ffprobe commands from the tool log and rewriting them for bare replays.

// isOutputProbe says whether an ffprobe run checked the job's output rather than its input.
func isOutputProbe(r bench.ToolRun) bool {
	files := r.Files()
	return len(files) > 0 && filepath.Base(files[len(files)-1]) == "video.mp4"
}

// runKinds summarizes a job's tool runs in order, for the log: "probe, encode".
func runKinds(runs []bench.ToolRun) string {
	var ks []string
	for _, r := range runs {
		k := r.Kind()
		if k == "encode" && slices.ContainsFunc(r.Files(), isPosterFile) {
			k = "encode+poster"
		}
		if r.Exit != 0 {
			k += fmt.Sprintf(" (exit %d)", r.Exit)
		}
		ks = append(ks, k)
	}
	return strings.Join(ks, ", ")
}

// capture finds the encode (or remux), the separate poster run if any and the output probe of one
// job. A transcode is one encode run, whose second output is the poster, and nothing else; a remux
// has a poster run beside it (and, in workers before the remux's header was read in Go, an ffprobe
// of its result).
func capture(runs []bench.ToolRun) (captured, error) {
	var cp captured
	inputProbes := 0
	for _, r := range runs {
		switch k := r.Kind(); k {
		case "encode", "remux":
			if r.Exit == 0 { // a failed remux falls back to an encode, a failed poster output to an encode without it
				cp.kind, cp.main = k, r.Args
			}
		case "poster":
			cp.poster = r.Args // the last poster run is the one that succeeded
		case "probe":
			if isOutputProbe(r) {
				cp.probe = r.Args
			} else {
				if inputProbes == 0 {
					cp.inputProbe = r.Args
				}
				inputProbes++
			}
		}
	}
	if cp.main == nil || inputProbes == 0 {
		return cp, fmt.Errorf("tool log lacks the encode or remux or the probe of the input (%d runs: %s)", len(runs), runKinds(runs))
	}
	switch cp.kind {
	case "remux":
		if cp.poster == nil {
			return cp, fmt.Errorf("tool log lacks the remux's poster run (%s)", runKinds(runs))
		}
	case "encode":
		if noPoster, ok := withoutPosterOutput(cp.main); ok {
			cp.mainNoPoster = noPoster
		} else if cp.poster == nil {
			return cp, fmt.Errorf("the encode has no poster output and no poster run followed (%s)", runKinds(runs))
		}
	}
	i := slices.Index(cp.main, "-i")
	if i < 0 || i+1 >= len(cp.main) || !strings.HasSuffix(cp.main[i+1], "/input") {
		return cp, fmt.Errorf("%s command has no -i file:<job>/input: %q", cp.kind, cp.main)
	}
	cp.jobDir = strings.TrimSuffix(strings.TrimPrefix(cp.main[i+1], "file:"), "/input")
	return cp, nil
}

// isPosterFile says whether a file: argument's path is a poster output: poster.jpg (one poster
// frame, the worker before it chose among candidates), or the candidates' patterns poster-%d.jpg and
// their luma planes poster-%d.pgm.
func isPosterFile(path string) bool {
	b := filepath.Base(path)
	return b == "poster.jpg" || strings.HasPrefix(b, "poster-")
}

// posterFile is the poster a bare run wrote in dir: poster.jpg, or the first candidate.
func posterFile(dir string) string {
	for _, n := range []string{"poster.jpg", "poster-1.jpg"} {
		if p := filepath.Join(dir, n); fileSize(p) > 0 {
			return p
		}
	}
	return filepath.Join(dir, "poster.jpg")
}

// removePosters removes what poster outputs left in dir, so the next run's are its own.
func removePosters(dir string) {
	for _, pat := range []string{"poster.jpg", "poster-*.jpg", "poster-*.pgm"} {
		ms, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, m := range ms {
			_ = os.Remove(m)
		}
	}
}

// withoutPosterOutput returns an encode without its poster output: the split and its poster branch
// cut from the -filter_complex graph, which then ends in [video] (as the worker writes it when it
// encodes without a poster), and the poster's outputs removed: -map [poster] through
// file:…/poster.jpg, or, since the worker chooses the poster among candidates, -map [pjpeg] through
// the last of file:poster-%d.jpg and file:poster-%d.pgm. ok is false when the encode has no poster output.
func withoutPosterOutput(args []string) (_ []string, ok bool) {
	fc := slices.Index(args, "-filter_complex")
	m := slices.IndexFunc(args, func(a string) bool { return a == "[poster]" || a == "[pjpeg]" })
	if fc < 0 || fc+1 >= len(args) || m <= fc+1 || args[m-1] != "-map" {
		return nil, false
	}
	end := -1
	for i := m; i < len(args); i++ {
		if p, ok := strings.CutPrefix(args[i], "file:"); ok && isPosterFile(p) {
			end = i
		}
	}
	graph, branch, cut := strings.Cut(args[fc+1], ",split=")
	if end < 0 || !cut || !(strings.HasSuffix(branch, "[poster]") || strings.HasSuffix(branch, "[pluma]")) {
		return nil, false
	}
	out := slices.Concat(args[:m-1], args[end+1:])
	out[fc+1] = graph + "[video]"
	return out, true
}

// posterCommand builds, for an encode that wrote its poster itself, the separate poster run the
// worker makes after a remux (poster() in transcoder/video_poster.go): the encode's input options,
// -skip_frame noref, -ss at the poster time of its split branch, the encode's MP4 as input, the branch's scale, one JPEG to
// the encode's poster path.
func posterCommand(enc []string) ([]string, error) {
	t := slices.Index(enc, "-t") // inputArgs end with -t <max duration> -i file:<input>
	fc := slices.Index(enc, "-filter_complex")
	if t < 0 || fc < 0 || fc+1 >= len(enc) {
		return nil, fmt.Errorf("building the poster command: the encode has no -t or -filter_complex: %q", enc)
	}
	if strings.Contains(enc[fc+1], ";[p]select=") {
		return candidatesCommand(enc, t, fc)
	}
	_, branch, ok1 := strings.Cut(enc[fc+1], ";[p]trim=start=")
	at, scale, ok2 := strings.Cut(branch, ",trim=end_frame=1,")
	scale, ok3 := strings.CutSuffix(scale, "[poster]")
	var mp4, poster string
	for _, f := range (bench.ToolRun{Args: enc}).Files() {
		switch filepath.Base(f) {
		case "video.mp4":
			mp4 = f
		case "poster.jpg":
			poster = f
		}
	}
	if !ok1 || !ok2 || !ok3 || mp4 == "" || poster == "" {
		return nil, fmt.Errorf("building the poster command: unexpected poster branch or outputs in %q", enc)
	}
	return slices.Concat(enc[:t], []string{"-skip_frame", "noref", "-ss", at, "-i", "file:" + mp4,
		"-map", "0:v:0", "-frames:v", "1", "-vf", scale,
		"-q:v", "3", "-f", "image2", "-update", "1", "-y", "file:" + poster}), nil
}

// candidatesCommand is posterCommand for an encode whose poster branch selects candidates
// (select='gte(t,T+selected_n*STEP)', then the candidates' scale, split and luma plane): the run the
// worker's remux path makes (poster() in transcoder/video_poster.go), -skip_frame noref -ss T on the
// encode's MP4, the branch's chain after its select on the video stream, and the encode's candidate
// outputs with one frame each.
func candidatesCommand(enc []string, t, fc int) ([]string, error) {
	_, branch, ok1 := strings.Cut(enc[fc+1], ";[p]select='gte(t,")
	at, rest, ok2 := strings.Cut(branch, "+")
	_, chain, ok3 := strings.Cut(rest, "',")
	m := slices.Index(enc, "[pjpeg]")
	var mp4 string
	end := -1
	for i, a := range enc {
		p, ok := strings.CutPrefix(a, "file:")
		switch {
		case !ok:
		case filepath.Base(p) == "video.mp4":
			mp4 = p
		case isPosterFile(p) && i > m:
			end = i
		}
	}
	if !ok1 || !ok2 || !ok3 || m < 1 || end < 0 || mp4 == "" {
		return nil, fmt.Errorf("building the poster command: unexpected candidates branch or outputs in %q", enc)
	}
	outs := slices.Clone(enc[m-1 : end+1])
	for i := range outs {
		if outs[i] == "-frames:v" && i+1 < len(outs) {
			outs[i+1] = "1"
		}
	}
	return slices.Concat(enc[:t], []string{"-skip_frame", "noref", "-ss", at, "-i", "file:" + mp4,
		"-filter_complex", "[0:v:0]null," + chain}, outs), nil
}

// bareArgs rewrites a captured command for the bare scratch dir bd: the job's input becomes
// bd/input and every other file (the MP4 and the poster, as outputs, or the MP4 as the poster's
// input) bd/out/<name>. Files are matched by name, not by directory: an encode has two outputs, and
// the worker's outputs have lived both in an out/ directory of the job dir and in the job dir itself.
// Any other mention of jobDir is replaced by bd.
func bareArgs(args []string, jobDir, bd string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		p, ok := strings.CutPrefix(a, "file:")
		switch {
		case ok && filepath.Base(p) == "input":
			out[i] = "file:" + filepath.Join(bd, "input")
		case ok:
			out[i] = "file:" + filepath.Join(bd, "out", filepath.Base(p))
		default:
			out[i] = strings.ReplaceAll(a, jobDir, bd)
		}
	}
	return out
}

// withFile returns args with the file: argument named name (video.mp4, poster.jpg) pointing at path
// instead. An encode has two outputs, so the one to move is found by its name, not its position.
func withFile(args []string, name, path string) ([]string, error) {
	args = slices.Clone(args)
	for i, a := range args {
		if strings.HasPrefix(a, "file:") && filepath.Base(a) == name {
			args[i] = "file:" + path
			return args, nil
		}
	}
	return nil, fmt.Errorf("replacing %s: not among the files of %q", name, args)
}

// timeTool runs bin with args in dir, with the worker's minimal environment, and returns its wall time.
func timeTool(ctx context.Context, bin, dir string, args []string) (float64, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Seconds()
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v: %s", filepath.Base(bin), shellJoin(args), err, out)
	}
	lastToolMaxRSS = 0
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		lastToolMaxRSS = ru.Maxrss << 10 // KiB on Linux
	}
	return took, nil
}

// lastToolMaxRSS is the peak resident memory of the latest timeTool run, in bytes (the benchmark runs
// its tools one at a time): the sizing table's memory per video slot.
var lastToolMaxRSS int64

// wrapperOverhead is the extra wall time of a tool run through the logging wrapper.
func wrapperOverhead(ctx context.Context, tl *bench.ToolLog) float64 {
	var direct, wrapped []float64
	for range 10 {
		d, err1 := timeTool(ctx, tl.RealFFprobe, os.TempDir(), []string{"-hide_banner", "-loglevel", "error", "-version"})
		wr, err2 := timeTool(ctx, tl.FFprobe, os.TempDir(), []string{"-hide_banner", "-loglevel", "error", "-version"})
		if err1 != nil || err2 != nil {
			return math.NaN()
		}
		direct, wrapped = append(direct, d), append(wrapped, wr)
	}
	return bench.Median(wrapped) - bench.Median(direct)
}
