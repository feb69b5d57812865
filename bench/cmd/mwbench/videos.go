package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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

func (b *bencher) videosPhase() error {
	return errors.Join(b.videoCompare(), b.videoLarge())
}

// captured is what the worker ran for one clip, learned from the tool log of its first job.
type captured struct {
	jobDir string   // the job's scratch dir (bareArgs moves its files to the bare run's own)
	kind   string   // "encode", or "remux" for inputs the worker stream-copies
	main   []string // the ffmpeg arguments of the encode (with its poster output) or remux that succeeded
	// mainNoPoster is main without its poster output (split branch and second output dropped): the
	// same encode minus the poster, to price it. Nil for a remux, or an encode without a poster output.
	mainNoPoster []string
	// poster is the separate poster run that succeeded: a remux's, or an encode's in the rare
	// fallbacks (its poster output failed or came out empty). Nil when the encode wrote the poster.
	poster []string
	probe  []string // ffprobe arguments of the probe of the output (a remux's; an encode's header is read in Go)
}

// videoTimes is one worker job's timing.
type videoTimes struct {
	e2e, probes, main, poster float64 // seconds; poster: separate poster runs only
	posterExposed             float64 // the part of the poster runs that neither the remux nor the output probe overlapped
	nProbes                   float64 // ffprobe runs (float for the medians)
	cpu                       float64 // CPU seconds of the worker, its tools and clamd
}

// videoCompare runs every clip through the worker (with ffmpeg and ffprobe wrapped to log their
// arguments and timings) and replays its exact commands bare, interleaved, run by run: the encode
// (which writes the poster too), or the remux then the poster. A transcode is also replayed without
// its poster output, to price the poster. It also times poster variants, and remux against
// transcode for the inputs the worker remuxes.
func (b *bencher) videoCompare() (err error) {
	dir := filepath.Join(b.work, "videos")
	tl, err := bench.NewToolLog(filepath.Join(dir, "tools"))
	if err != nil {
		return err
	}
	w, err := b.startWorker("videos", "compare", b.parallel, 1, "--ffmpeg", tl.FFmpeg, "--ffprobe", tl.FFprobe)
	if err != nil {
		return err
	}
	defer stopWorker(w, &err)
	c, err := b.dial(w)
	if err != nil {
		return err
	}
	defer c.Close()

	clips := b.corpus.Clips
	caps := map[string]captured{}
	bareDirs := map[string]string{}
	for _, cl := range clips {
		key := "v/" + cl.Name
		if err := c.Upload(b.ctx, key, cl.Path); err != nil {
			return err
		}
		// Warm-up job, which also captures the commands.
		t, runs, err := b.videoJob(c, tl, key)
		if err != nil {
			return fmt.Errorf("%s: %w", cl.Name, err)
		}
		cp, err := capture(runs)
		if err != nil {
			return fmt.Errorf("%s: %w", cl.Name, err)
		}
		caps[cl.Name] = cp
		b.logf("videos %s warm-up: %s end to end (%s; %s)", cl.Name, secs(t.e2e), cp.kind, runKinds(runs))
		if cp.kind == "encode" && (cp.mainNoPoster == nil || cp.poster != nil || cp.probe != nil) {
			b.logf("videos %s: the worker's transcode took a fallback (poster output: %t, separate poster run: %t, output probe: %t)",
				cl.Name, cp.mainNoPoster != nil, cp.poster != nil, cp.probe != nil)
		}
		bd := filepath.Join(dir, "bare", strings.NewReplacer(".", "_").Replace(cl.Name))
		if err := os.MkdirAll(filepath.Join(bd, "out"), 0o755); err != nil {
			return err
		}
		if err := linkOrCopy(cl.Path, filepath.Join(bd, "input")); err != nil {
			return err
		}
		bareDirs[cl.Name] = bd
	}

	clamdPid, err := bench.FindProcess("--config-file=" + b.clamd.ConfigPath)
	if err != nil {
		return err
	}
	cpuOf := func() float64 {
		a, _ := bench.ProcessTreeCPU(w.Pid())
		c, _ := bench.ProcessCPU(clamdPid)
		return (a + c).Seconds()
	}
	metricsBefore, _ := w.Metrics(b.ctx)
	workerT := map[string][]videoTimes{}
	bareMain := map[string][]float64{}     // the encode (poster output included) or the remux
	barePoster := map[string][]float64{}   // the separate poster run after it; 0 when the encode wrote the poster
	bareNoPoster := map[string][]float64{} // the encode without its poster output
	bareCPU := map[string][]float64{}
	bareNoPosterCPU := map[string][]float64{}
	posterSize := map[string]int64{} // the poster the bare replay wrote
	for run := range b.runs {
		for i, cl := range clips {
			cp, bd := caps[cl.Name], bareDirs[cl.Name]
			out := filepath.Join(bd, "out")
			doWorker := func() error {
				c0 := cpuOf()
				t, _, err := b.videoJob(c, tl, "v/"+cl.Name)
				t.cpu = cpuOf() - c0
				workerT[cl.Name] = append(workerT[cl.Name], t)
				return err
			}
			// What a naive script would run: the worker's commands, one after the other.
			doBare := func() error {
				c0 := rusage(syscall.RUSAGE_CHILDREN)
				_ = os.Remove(filepath.Join(out, "poster.jpg"))
				main, err := timeTool(b.ctx, tl.RealFFmpeg, out, bareArgs(cp.main, cp.jobDir, bd))
				if err != nil {
					return fmt.Errorf("bare %s: %w", cp.kind, err)
				}
				var pst float64
				if cp.poster != nil {
					if pst, err = timeTool(b.ctx, tl.RealFFmpeg, out, bareArgs(cp.poster, cp.jobDir, bd)); err != nil {
						return fmt.Errorf("bare poster: %w", err)
					}
				}
				bareMain[cl.Name] = append(bareMain[cl.Name], main)
				barePoster[cl.Name] = append(barePoster[cl.Name], pst)
				bareCPU[cl.Name] = append(bareCPU[cl.Name], (rusage(syscall.RUSAGE_CHILDREN) - c0).Seconds())
				posterSize[cl.Name] = fileSize(filepath.Join(out, "poster.jpg"))
				return nil
			}
			steps := []func() error{doWorker, doBare}
			if cp.mainNoPoster != nil {
				steps = append(steps, func() error {
					c0 := rusage(syscall.RUSAGE_CHILDREN)
					t, err := timeTool(b.ctx, tl.RealFFmpeg, out, bareArgs(cp.mainNoPoster, cp.jobDir, bd))
					if err != nil {
						return fmt.Errorf("bare encode without the poster output: %w", err)
					}
					bareNoPoster[cl.Name] = append(bareNoPoster[cl.Name], t)
					bareNoPosterCPU[cl.Name] = append(bareNoPosterCPU[cl.Name], (rusage(syscall.RUSAGE_CHILDREN) - c0).Seconds())
					return nil
				})
			}
			// Rotate the order run by run and clip by clip, so that none of them always goes first.
			k := (run + i) % len(steps)
			for _, step := range slices.Concat(steps[k:], steps[:k]) {
				if err := step(); err != nil {
					return fmt.Errorf("%s: %w", cl.Name, err)
				}
			}
			wt := workerT[cl.Name][len(workerT[cl.Name])-1]
			line := fmt.Sprintf("videos run %d %s: worker %s, bare %s", run+1, cl.Name, secs(wt.e2e),
				secs(last(bareMain[cl.Name])+last(barePoster[cl.Name])))
			if cp.mainNoPoster != nil {
				line += fmt.Sprintf(" (encode without the poster output %s)", secs(last(bareNoPoster[cl.Name])))
			}
			b.logf("%s", line)
		}
	}
	metricsAfter, _ := w.Metrics(b.ctx)

	// Per clip: worker end to end vs the bare commands. Transcoded and remuxed clips are reported
	// apart: a remux takes a fraction of a second, so the worker's fixed costs weigh far more there.
	var rows [][]string
	type worstOf struct {
		r, cpu float64
		name   string
	}
	worst := map[string]*worstOf{"encode": {}, "remux": {}}
	type posterShare struct {
		share float64
		how   string // what was measured, for the targets table
	}
	shares := map[string]posterShare{}
	posterCost := map[string]float64{} // what the poster output adds to the bare encode
	for _, cl := range clips {
		cp, ts := caps[cl.Name], workerT[cl.Name]
		e2e := bench.Median(pick(ts, func(t videoTimes) float64 { return t.e2e }))
		bare := bench.Median(sums(bareMain[cl.Name], barePoster[cl.Name]))
		r := e2e / bare
		cpuW, cpuB := bench.Median(pick(ts, func(t videoTimes) float64 { return t.cpu })), bench.Median(bareCPU[cl.Name])
		if wo := worst[cp.kind]; wo != nil && r > wo.r {
			wo.r, wo.cpu, wo.name = r, cpuW/cpuB, cl.Name
		}
		sepPoster := bench.Median(pick(ts, func(t videoTimes) float64 { return t.poster }))
		sepShare := bench.Median(pick(ts, func(t videoTimes) float64 { return t.poster / t.e2e }))
		var ps posterShare
		var posterCol string
		switch {
		case cp.mainNoPoster != nil:
			// The poster is one more output of the encode: its cost is what it adds to that run, measured
			// bare (the worker's run cannot be split). Noise can make it slightly negative; the CPU time
			// it adds, which other load disturbs less than wall time, is given alongside.
			with, without := bench.Median(bareMain[cl.Name]), bench.Median(bareNoPoster[cl.Name])
			cpu := bench.Median(bareCPU[cl.Name]) - bench.Median(bareNoPosterCPU[cl.Name])
			posterCost[cl.Name] = with - without
			ps.share = (with - without) / e2e
			ps.how = fmt.Sprintf("%s: bare encode with − without its poster output (%s − %s) ÷ worker publish → response %s; "+
				"CPU time with − without: %s", cl.Name, secs(with), secs(without), secs(e2e), signedMS(cpu))
			posterCol = fmt.Sprintf("%s in the encode (without: %s; CPU %s)", signedMS(with-without), secs(without), signedMS(cpu))
			if cp.poster != nil { // the poster output came out empty and the worker made it again, separately
				ps.share += sepShare
				ps.how += fmt.Sprintf(", plus its separate poster run %s", ms(sepPoster))
				posterCol += fmt.Sprintf(" + a %s run", ms(sepPoster))
			}
		case cp.kind == "remux":
			// The poster run (from the upload's video stream) starts with the remux and runs beside it
			// and the ffprobe of the output: only what sticks out of them lengthens the job.
			exposed := bench.Median(pick(ts, func(t videoTimes) float64 { return t.posterExposed }))
			ps.share = bench.Median(pick(ts, func(t videoTimes) float64 { return t.posterExposed / t.e2e }))
			ps.how = fmt.Sprintf("%s: the part of the poster run not overlapped by the remux and the ffprobe of the output beside it "+
				"(%s of the %s run) ÷ publish → response %s; the whole poster run is %.1f %% of it",
				cl.Name, ms(exposed), ms(sepPoster), secs(e2e), 100*sepShare)
			posterCol = fmt.Sprintf("%s run, %s not overlapped", ms(sepPoster), ms(exposed))
		default: // an encode without a poster output, followed by a separate poster run
			ps.share = sepShare
			ps.how = fmt.Sprintf("%s: separate poster ffmpeg run (the encode had no poster output) ÷ publish → response %s",
				cl.Name, secs(e2e))
			posterCol = fmt.Sprintf("%s run", ms(sepPoster))
		}
		shares[cl.Name] = ps
		rows = append(rows, []string{cl.Name, mib(float64(fileSize(cl.Path))), cp.kind, secs(e2e), secs(bare), ratio(r),
			ms(e2e - bare),
			secs(bench.Median(pick(ts, func(t videoTimes) float64 { return t.main }))),
			secs(bench.Median(bareMain[cl.Name])),
			fmt.Sprintf("%s (×%.0f)", ms(bench.Median(pick(ts, func(t videoTimes) float64 { return t.probes }))),
				bench.Median(pick(ts, func(t videoTimes) float64 { return t.nProbes }))),
			posterCol,
			fmt.Sprintf("%.1f %%", 100*ps.share),
			fmt.Sprintf("%.1f / %.1f", cpuW, cpuB)})
	}
	for _, k := range []string{"encode", "remux"} {
		wo := worst[k]
		if wo.name == "" {
			continue
		}
		what := map[string]string{"encode": "transcoded clips", "remux": "remuxed clips (H.264/AAC MP4)"}[k]
		b.rep.row("videos", "end-to-end wall time ÷ bare ffmpeg (the worker's own commands, poster included), worst of the "+what,
			fmt.Sprintf("worst: %s (CPU time worker ÷ bare %s); every clip below", wo.name, ratio(wo.cpu)),
			ratio(wo.r), "≤ 1.05×", atMost(wo.r, 1.05))
	}
	// Poster share on 1080p: the worst transcoded clip, and separately a remuxed one (its job is short,
	// so the same poster weighs much more).
	var enc, rem posterShare
	enc.share, rem.share = math.Inf(-1), math.Inf(-1)
	for _, cl := range clips {
		if !strings.HasPrefix(cl.Name, "1080p") {
			continue
		}
		s := shares[cl.Name]
		if caps[cl.Name].kind == "remux" {
			if s.share > rem.share {
				rem = s
			}
		} else if s.share > enc.share {
			enc = s
		}
	}
	if enc.how != "" {
		b.rep.row("videos", "poster share of job time, 1080p transcoded clip (worst)",
			enc.how, fmt.Sprintf("%.1f %%", 100*enc.share), "≤ 5 %", atMost(enc.share, 0.05))
	}
	if rem.how != "" {
		b.rep.row("videos", "poster share of job time, 1080p remuxed clip",
			rem.how, fmt.Sprintf("%.1f %%", 100*rem.share), "≤ 5 %", atMost(rem.share, 0.05))
	}

	overhead := b.wrapperOverhead(tl)
	b.rep.section("Videos: worker end to end vs bare ffmpeg",
		"%d s clips at 25 fps with audio (H.264/AAC MP4 with fast start, HEVC/AAC MOV, VP9/Opus WebM), one job at a time "+
			"(`--max-video-jobs 1`), medians of %d runs, worker and bare (and, for transcodes, the bare encode without its "+
			"poster output) interleaved. *worker*: publish → response (download with clamd INSTREAM, ffprobe of the input, "+
			"then a transcode: one ffmpeg run writing the MP4 and the poster, the MP4's header read in Go; or a remux: the "+
			"stream copy, then the ffprobe of the result, with a poster ffmpeg run from the upload's video stream beside both; uploads), so ffprobe ×1 "+
			"(transcode) / ×2 (remux). *bare*: the worker's own commands, taken from its first job of the clip (ffmpeg and "+
			"ffprobe wrapped with a logging script; the wrapper costs %s per tool run, charged to the worker), run with "+
			"only the scratch paths changed: the encode with its poster output, or the remux then the poster one after "+
			"the other, as a naive script would (without the ffprobe of the result).\n\n%s\n"+
			"*overhead* is the worker's end-to-end time minus the bare commands: roughly fixed per job, so the ratio "+
			"improves with longer clips. *worker probes* is the sum of its ffprobe runs (how many in parentheses: the "+
			"input in detection, which the transform reuses; for a remux also the output). *poster*: for a transcode, "+
			"what the poster output adds to the encode, the bare encode with it minus without it (the split branch "+
			"dropped from `-filter_complex` and the second output's arguments removed: a difference of two medians of "+
			"multi-second runs, whose noise on a loaded machine can exceed the poster's cost either way, down to below "+
			"zero), and the CPU time it adds; for a remux, the worker's poster run and the part of it the "+
			"remux and the ffprobe of the output beside it did not overlap. *poster share*: that cost (the difference, or the part not overlapped) ÷ the worker's end "+
			"to end time. *CPU s*: user + system CPU seconds of the whole job (the worker process, its ffmpeg/ffprobe "+
			"runs and clamd) and of the bare commands; less disturbed by other load than wall time.\n\n%s",
		clipSeconds, b.runs, ms(overhead),
		table([]string{"clip", "file", "path", "worker e2e", "bare", "ratio", "overhead", "worker encode/remux",
			"bare encode/remux", "worker probes", "poster", "poster share", "CPU s worker / bare"}, rows),
		stageTable(metricsBefore, metricsAfter))
	for _, name := range []string{"1080p-hevc.mov", "1080p-h264.mp4"} {
		ex, ok := caps[name]
		if !ok {
			continue
		}
		switch {
		case ex.mainNoPoster != nil:
			cmd := fmt.Sprintf("# the worker's encode for %s, one run writing the MP4 and the poster (replayed bare with its own scratch dir):\nffmpeg %s\n"+
				"# the same without the poster output, for the poster's cost:\nffmpeg %s", name, shellJoin(ex.main), shellJoin(ex.mainNoPoster))
			if ex.poster != nil {
				cmd += "\n# then its separate poster run:\nffmpeg " + shellJoin(ex.poster)
			}
			b.rep.command("%s", cmd)
		default:
			b.rep.command("# the worker's %s for %s (replayed bare with its own scratch dir), then its poster "+
				"(which the worker runs side by side with the ffprobe of the result):\nffmpeg %s\nffmpeg %s",
				ex.kind, name, shellJoin(ex.main), shellJoin(ex.poster))
		}
	}
	return errors.Join(b.posterVariants(tl, caps, bareDirs, posterCost, posterSize), b.remuxVsTranscode(tl, caps, bareDirs, bareMain))
}

// videoJob runs one video job and splits its time by the tool runs logged meanwhile.
func (b *bencher) videoJob(c *bench.Client, tl *bench.ToolLog, key string) (videoTimes, []bench.ToolRun, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Minute)
	defer cancel()
	j, err := c.Submit(ctx, key)
	if err != nil {
		return videoTimes{}, nil, err
	}
	a, err := c.Wait(ctx, j)
	if err != nil {
		return videoTimes{}, nil, err
	}
	if n := len(a.Resp.Processed); n != 2 {
		return videoTimes{}, nil, fmt.Errorf("response has %d variants, want mp4 and poster: %+v", n, a.Resp)
	}
	all, err := tl.Runs()
	if err != nil {
		return videoTimes{}, nil, err
	}
	runs := bench.RunsBetween(all, j.Published, a.At)
	t := videoTimes{e2e: a.At.Sub(j.Published).Seconds()}
	var posters, beside []bench.ToolRun // beside: the runs a remux's poster overlaps (the remux, the output probe)
	for _, r := range runs {
		switch r.Kind() {
		case "probe":
			t.probes += r.Took().Seconds()
			t.nProbes++
			if isOutputProbe(r) {
				beside = append(beside, r)
			}
		case "remux":
			beside = append(beside, r)
			t.main += r.Took().Seconds()
		case "encode":
			t.main += r.Took().Seconds()
		case "poster":
			t.poster += r.Took().Seconds()
			posters = append(posters, r)
		}
	}
	for _, p := range posters {
		exposed := p.Took()
		for _, o := range beside { // run one after the other, so their overlaps with p add up
			exposed -= bench.Overlap(p, o)
		}
		t.posterExposed += max(exposed, 0).Seconds()
	}
	return t, runs, nil
}

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
		if k == "encode" && slices.ContainsFunc(r.Files(), func(f string) bool { return filepath.Base(f) == "poster.jpg" }) {
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
// is followed by a poster run and the ffprobe of its result.
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
				inputProbes++
			}
		}
	}
	if cp.main == nil || inputProbes == 0 {
		return cp, fmt.Errorf("tool log lacks the encode or remux or the probe of the input (%d runs: %s)", len(runs), runKinds(runs))
	}
	switch cp.kind {
	case "remux":
		if cp.poster == nil || cp.probe == nil {
			return cp, fmt.Errorf("tool log lacks the remux's poster run or the probe of its output (%s)", runKinds(runs))
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

// withoutPosterOutput returns an encode without its poster output: the split and its poster branch
// cut from the -filter_complex graph, which then ends in [video] (as the worker writes it when it
// encodes without a poster), and the second output's arguments, -map [poster] through
// file:…/poster.jpg, removed. ok is false when the encode has no poster output.
func withoutPosterOutput(args []string) (_ []string, ok bool) {
	fc := slices.Index(args, "-filter_complex")
	m := slices.Index(args, "[poster]")
	if fc < 0 || fc+1 >= len(args) || m <= fc+1 || args[m-1] != "-map" {
		return nil, false
	}
	end := slices.IndexFunc(args[m:], func(a string) bool {
		return strings.HasPrefix(a, "file:") && filepath.Base(a) == "poster.jpg"
	})
	graph, branch, cut := strings.Cut(args[fc+1], ",split=")
	if end < 0 || !cut || !strings.HasSuffix(branch, "[poster]") {
		return nil, false
	}
	out := slices.Concat(args[:m-1], args[m+end+1:])
	out[fc+1] = graph + "[video]"
	return out, true
}

// posterCommand builds, for an encode that wrote its poster itself, the separate poster run the
// worker makes after a remux (poster() in transcoder/video.go): the encode's input options, -ss at
// the poster time of its split branch, the encode's MP4 as input, the branch's scale, one JPEG to
// the encode's poster path.
func posterCommand(enc []string) ([]string, error) {
	t := slices.Index(enc, "-t") // inputArgs end with -t <max duration> -i file:<input>
	fc := slices.Index(enc, "-filter_complex")
	if t < 0 || fc < 0 || fc+1 >= len(enc) {
		return nil, fmt.Errorf("building the poster command: the encode has no -t or -filter_complex: %q", enc)
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
	return slices.Concat(enc[:t], []string{"-ss", at, "-i", "file:" + mp4,
		"-map", "0:v:0", "-frames:v", "1", "-vf", scale,
		"-q:v", "3", "-f", "image2", "-update", "1", "-y", "file:" + poster}), nil
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
	return took, nil
}

// wrapperOverhead is the extra wall time of a tool run through the logging wrapper.
func (b *bencher) wrapperOverhead(tl *bench.ToolLog) float64 {
	var direct, wrapped []float64
	for range 10 {
		d, err1 := timeTool(b.ctx, tl.RealFFprobe, os.TempDir(), []string{"-hide_banner", "-loglevel", "error", "-version"})
		wr, err2 := timeTool(b.ctx, tl.FFprobe, os.TempDir(), []string{"-hide_banner", "-loglevel", "error", "-version"})
		if err1 != nil || err2 != nil {
			return math.NaN()
		}
		direct, wrapped = append(direct, d), append(wrapped, wr)
	}
	return bench.Median(wrapped) - bench.Median(direct)
}

// posterVariants times a separate poster run against key-frame-only decoding: on a remuxed 1080p
// output the worker's own poster command; on a transcoded one, whose encode writes the poster itself,
// the command the worker's remux path would run (built from the encode's poster branch), next to
// what the poster output adds to the encode, and also with a key frame forced at the poster time in
// the encode.
func (b *bencher) posterVariants(tl *bench.ToolLog, caps map[string]captured, bareDirs map[string]string,
	posterCost map[string]float64, posterSize map[string]int64) error {
	const n = 5
	var rows [][]string
	var notes []string
	var cmds []string
	for _, name := range []string{"1080p-hevc.mov", "1080p-h264.mp4"} {
		cp, ok := caps[name]
		if !ok {
			continue
		}
		bd := bareDirs[name]
		out := filepath.Join(bd, "out")
		mp4 := filepath.Join(out, "video.mp4") // written by the bare replay of the worker's encode or remux
		type variant struct {
			name string
			args []string
		}
		var variants []variant
		var base []string
		baseName := "the worker's: `-ss T -i` (decodes from the key frame before T up to T)"
		if cp.poster != nil {
			base = bareArgs(cp.poster, cp.jobDir, bd)
		} else {
			var err error
			if base, err = posterCommand(bareArgs(cp.main, cp.jobDir, bd)); err != nil {
				return err
			}
			baseName = "a separate run on the MP4, as the worker's remux path runs one on an H.264 upload: `-ss T -i` (decodes from the key frame before T up to T)"
		}
		in := slices.Index(base, "-i")
		ss := slices.Index(base, "-ss")
		if in < 0 || ss < 0 || ss > in {
			notes = append(notes, fmt.Sprintf("%s: the poster command has no `-ss T` before `-i` (%s); skipped", name, shellJoin(base)))
			continue
		}
		at := base[ss+1]
		skip := slices.Concat(base[:ss], []string{"-skip_frame", "nokey"}, base[ss:])
		skipNA := slices.Concat(base[:ss], []string{"-skip_frame", "nokey", "-noaccurate_seek"}, base[ss:])
		variants = append(variants,
			variant{baseName, base},
			variant{"`-skip_frame nokey -ss T -i` (key frames only)", skip},
			variant{"`-skip_frame nokey -noaccurate_seek -ss T -i`", skipNA},
		)
		if cp.kind == "encode" {
			// The same encode, without its poster output, with a key frame at the first frame at or after
			// T (a plain time rounds to the nearest frame, which may be before T, where an accurate seek
			// to T skips it).
			keyedMP4 := filepath.Join(out, "video_kf.mp4")
			enc := bareArgs(cp.main, cp.jobDir, bd)
			if cp.mainNoPoster != nil {
				enc = bareArgs(cp.mainNoPoster, cp.jobDir, bd)
			}
			f := -1 // the MP4 output's -f: the key frames are an option of that output
			for i := 0; i+1 < len(enc) && f < 0; i++ {
				if enc[i] == "-f" && enc[i+1] == "mp4" {
					f = i
				}
			}
			if f < 0 {
				return fmt.Errorf("encode command has no -f mp4: %q", enc)
			}
			keyed, err := withFile(slices.Concat(enc[:f], []string{"-force_key_frames", "expr:gte(t," + at + ")*eq(n_forced,0)"}, enc[f:]),
				"video.mp4", keyedMP4)
			if err != nil {
				return err
			}
			if _, err := timeTool(b.ctx, tl.RealFFmpeg, out, keyed); err != nil {
				return err
			}
			onKeyed := func(args []string) []string {
				args = slices.Clone(args)
				args[slices.Index(args, "-i")+1] = "file:" + keyedMP4
				return args
			}
			variants = append(variants,
				variant{"the same separate run, on the encode with a key frame forced at T", onKeyed(base)},
				variant{"`-skip_frame nokey -ss T -i`, on the encode with a key frame forced at T: decodes one frame", onKeyed(skip)})
			notes = append(notes, fmt.Sprintf("%s: forcing the key frame (`-force_key_frames 'expr:gte(t,T)*eq(n_forced,0)'` "+
				"added to the worker's encode) made the MP4 %+.1f %% larger", name,
				100*(float64(fileSize(keyedMP4))/float64(fileSize(mp4))-1)))
			cmds = append(cmds, shellJoin(keyed), shellJoin(onKeyed(skip)))
		}
		var first float64
		label := fmt.Sprintf("%s (%s, T = %s)", name, cp.kind, at)
		for vi, v := range variants {
			var ts []float64
			poster := filepath.Join(out, "poster.jpg")
			for range n {
				_ = os.Remove(poster)
				t, err := timeTool(b.ctx, tl.RealFFmpeg, out, v.args)
				if err != nil {
					return err
				}
				ts = append(ts, t)
			}
			med := bench.Median(ts)
			if vi == 0 {
				first = med
			}
			got := "**no frame** (the worker would try again from 0)"
			if sz := fileSize(poster); sz > 0 {
				got = fmt.Sprintf("%d KiB", sz>>10)
			}
			rows = append(rows, []string{label, v.name, ms(med), ratio(first / med), got})
		}
		if c, ok := posterCost[name]; ok {
			// Speed-up only for a positive cost: a difference of two noisy medians can be ≤ 0.
			speedup := "n/a (cost ≤ 0)"
			if c > 0 {
				speedup = ratio(first / c)
			}
			got := "**no frame** (the worker would make it in a separate run)"
			if sz := posterSize[name]; sz > 0 {
				got = fmt.Sprintf("%d KiB", sz>>10)
			}
			rows = append(rows, []string{label, "the worker's: a second output of the encode (the bare encode with it − without it, " +
				"from the runs above)", signedMS(c), speedup, got})
		}
	}
	ver, _ := timeToolN(b.ctx, tl.RealFFmpeg, os.TempDir(), []string{"-hide_banner", "-loglevel", "error", "-version"}, n)
	b.rep.section("Videos: poster variants",
		"On the 1080p outputs the bare replays wrote (%d s at 25 fps; the corpus clips and the worker's encodes use "+
			"x264's default GOP, so each has one key frame, at 0), T as the worker chose it, medians of %d runs. The "+
			"worker makes a separate poster run only after a remux (and in the rare fallbacks of an encode); a transcode's "+
			"poster is a second output of its encode. So on the transcoded output the `-ss T -i` rows time the command "+
			"the worker's remux path would run (`poster()` in transcoder/video.go, built from the encode's poster "+
			"branch: same T and scale), and the last row what the worker actually pays. *speed-up* is against the first "+
			"row of the output. `ffmpeg -version` alone takes %s (process start and library loading).\n\n%s\n%s",
		clipSeconds, n, ms(ver),
		table([]string{"output", "poster command", "time", "speed-up", "poster"}, rows),
		"- "+strings.Join(notes, "\n- "))
	if len(cmds) > 0 {
		b.rep.command("# poster experiment: the worker's encode (without its poster output) plus a key frame forced at T, then a separate poster run with -skip_frame nokey:\nffmpeg %s",
			strings.Join(cmds, "\nffmpeg "))
	}
	return nil
}

func timeToolN(ctx context.Context, bin, dir string, args []string, n int) (float64, error) {
	var ts []float64
	for range n {
		t, err := timeTool(ctx, bin, dir, args)
		if err != nil {
			return 0, err
		}
		ts = append(ts, t)
	}
	return bench.Median(ts), nil
}

// remuxVsTranscode compares, for every clip the worker remuxed, the remux (and the ffprobe of its
// result, as the worker checks it) with a transcode of the same input by the worker's encode command
// (taken from the transcoded clip of the same resolution, without its poster output: the poster is
// left out on both sides), all bare.
func (b *bencher) remuxVsTranscode(tl *bench.ToolLog, caps map[string]captured, bareDirs map[string]string, bareMain map[string][]float64) error {
	var rows [][]string
	worst, worstName := math.Inf(1), ""
	for _, cl := range b.corpus.Clips {
		cp := caps[cl.Name]
		if cp.kind != "remux" {
			continue
		}
		res, _, _ := strings.Cut(cl.Name, "-")
		var donor captured
		for _, o := range b.corpus.Clips {
			if strings.HasPrefix(o.Name, res+"-") && caps[o.Name].kind == "encode" {
				donor = caps[o.Name]
				break
			}
		}
		if donor.main == nil {
			continue
		}
		bd := bareDirs[cl.Name]
		out := filepath.Join(bd, "out")
		enc := donor.main
		if donor.mainNoPoster != nil {
			enc = donor.mainNoPoster
		}
		transcode, err := withFile(bareArgs(enc, donor.jobDir, bd), "video.mp4", filepath.Join(out, "transcoded.mp4"))
		if err != nil {
			return err
		}
		probe := bareArgs(cp.probe, cp.jobDir, bd) // of bd/out/video.mp4, the bare remux's output
		var tr, prb []float64
		for range b.runs {
			t1, err := timeTool(b.ctx, tl.RealFFmpeg, out, transcode)
			if err != nil {
				return err
			}
			t2, err := timeTool(b.ctx, tl.RealFFprobe, out, probe)
			if err != nil {
				return err
			}
			tr, prb = append(tr, t1), append(prb, t2)
		}
		rem := bench.Median(bareMain[cl.Name])
		fast := rem + bench.Median(prb)
		r := bench.Median(tr) / fast
		if r < worst {
			worst, worstName = r, cl.Name
		}
		rows = append(rows, []string{cl.Name, secs(bench.Median(tr)), ms(rem), ms(bench.Median(prb)), ratio(r),
			fmt.Sprintf("%.1f / %.1f MiB", float64(fileSize(filepath.Join(out, "video.mp4")))/(1<<20), float64(fileSize(filepath.Join(out, "transcoded.mp4")))/(1<<20))})
		if strings.HasPrefix(cl.Name, "1080p") {
			b.rep.command("# transcode of %s for the remux comparison (the worker's encode of the 1080p clip it transcodes, without its poster output):\nffmpeg %s", cl.Name, shellJoin(transcode))
		}
	}
	if worstName == "" {
		b.rep.row("videos", "fast path: remux vs transcode, H.264/AAC MP4", "**the worker remuxed no clip**", "n/a", "≥ 10×", "**MISS**")
		return nil
	}
	b.rep.row("videos", "fast path: transcode time ÷ (remux + ffprobe of the result), H.264/AAC MP4, worst clip",
		fmt.Sprintf("worst: %s; the worker's remux and output probe vs its encode command (without the poster output) on the same input, bare", worstName),
		ratio(worst), "≥ 10×", atLeast(worst, 10))
	b.rep.section("Videos: remux vs transcode",
		"For the clips the worker remuxes (H.264/AAC in MP4/MOV within the caps): its remux (median of the bare replays "+
			"above) plus the ffprobe of the result it checks, against a transcode of the same input with the worker's "+
			"encode command for that resolution (medians of %d). The poster is left out on both sides: the encode's "+
			"poster output is dropped, and the remux path's poster run, side by side with that ffprobe in the worker, is "+
			"priced in the first table. (The worker reads a transcode's MP4 header in Go, so the transcode side has no "+
			"ffprobe to add.)\n\n%s",
		b.runs, table([]string{"clip", "transcode", "remux", "ffprobe of the result", "transcode ÷ (remux + probe)", "remuxed / transcoded size"}, rows))
	return nil
}

func (b *bencher) videoLarge() (err error) {
	var extra []string
	if b.largeMiB > 480 {
		extra = []string{"--max-input-bytes", fmt.Sprintf("%dMiB", b.largeMiB+64)}
	}
	w, err := b.startWorker("videos", "large", b.parallel, 1, extra...)
	if err != nil {
		return err
	}
	defer stopWorker(w, &err)
	c, err := b.dial(w)
	if err != nil {
		return err
	}
	defer c.Close()
	m00, err := w.Memory()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := c.Upload(b.ctx, "large/large.mov", b.corpus.Large); err != nil {
		return err
	}
	upload := time.Since(t0)
	m0, err := w.Memory()
	if err != nil {
		return err
	}
	s := bench.StartSampler(w.Pid(), 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Minute)
	defer cancel()
	j, err := c.Submit(ctx, "large/large.mov")
	if err != nil {
		s.Stop()
		return err
	}
	a, err := c.Wait(ctx, j)
	peak, samples := s.Stop()
	if err != nil {
		return fmt.Errorf("large video: %w", err)
	}
	m1, err := w.Memory()
	if err != nil {
		return err
	}
	if m1.HWM > m0.HWM {
		peak = max(peak, m1.HWM)
	}
	rise := float64(peak - m0.RSS)
	size := fileSize(b.corpus.Large)
	b.rep.row("videos", fmt.Sprintf("RSS rise with a %s input", mib(float64(size))),
		fmt.Sprintf("peak during the job %s − before %s", mib(float64(peak)), mib(float64(m0.RSS))),
		mib(rise), "≤ 64 MiB", atMost(rise, 64<<20))
	b.rep.section("Videos: large input",
		"A %s uncompressed 1080p MOV (%d frames), uploaded into a fresh worker's embedded object store (%s; the "+
			"worker's RSS went from %s to %s and its VmHWM to %s during the upload, which is the embedded NATS server "+
			"receiving it, not the job), then one request. RSS sampled every 20 ms (%d samples) while the job ran "+
			"(%s: download, scan, probe, encode by ffmpeg in its own process, upload); VmHWM after: %s.",
		mib(float64(size)), b.corpus.LargeFrames, upload.Round(time.Millisecond), mib(float64(m00.RSS)), mib(float64(m0.RSS)),
		mib(float64(m0.HWM)), samples, a.At.Sub(j.Published).Round(time.Millisecond), mib(float64(m1.HWM)))
	if b.largeMiB < 1024 {
		b.rep.note("Large input: %s instead of 1 GB, to stay under the worker's default 500 MiB cap and the time "+
			"budget; `mwbench -large-mib 1024` raises clamd's limits and --max-input-bytes and measures 1 GiB.", mib(float64(size)))
	}
	return nil
}

func pick[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func sums(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] + b[i]
	}
	return out
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " '\"()$*?[]{};&|<>\\,") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}

// linkOrCopy hard-links src to dst, copying when they are on different filesystems.
func linkOrCopy(src, dst string) error {
	_ = os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// last returns the last of xs, 0 for none.
func last(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

func signedMS(s float64) string { return fmt.Sprintf("%+.0f ms", s*1000) }
