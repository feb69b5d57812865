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
	jobDir string   // the job's scratch dir, replaced by the bare run's own
	kind   string   // "encode", or "remux" for inputs the worker stream-copies
	main   []string // the ffmpeg arguments of the encode or remux
	poster []string // the ffmpeg arguments of the poster that succeeded
	probe  []string // ffprobe arguments of the probe of the output
}

// videoTimes is one worker job's timing.
type videoTimes struct {
	e2e, probes, main, poster float64 // seconds
	cpu                       float64 // CPU seconds of the worker, its tools and clamd
}

// videoCompare runs every clip through the worker (with ffmpeg and ffprobe wrapped to log their
// arguments and timings) and replays the exact encode (or remux) and poster commands bare,
// interleaved, run by run. It also times poster variants, and remux against transcode for the inputs
// the worker remuxes.
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
		b.logf("videos %s warm-up: %s end to end (%s)", cl.Name, secs(t.e2e), cp.kind)
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
	bareMain := map[string][]float64{}
	barePoster := map[string][]float64{}
	bareCPU := map[string][]float64{}
	for run := range b.runs {
		for i, cl := range clips {
			cp, bd := caps[cl.Name], bareDirs[cl.Name]
			doWorker := func() error {
				c0 := cpuOf()
				t, _, err := b.videoJob(c, tl, "v/"+cl.Name)
				t.cpu = cpuOf() - c0
				workerT[cl.Name] = append(workerT[cl.Name], t)
				return err
			}
			doBare := func() error {
				c0 := rusage(syscall.RUSAGE_CHILDREN)
				main, err := timeTool(b.ctx, tl.RealFFmpeg, filepath.Join(bd, "out"), replaceDir(cp.main, cp.jobDir, bd))
				if err != nil {
					return fmt.Errorf("bare %s: %w", cp.kind, err)
				}
				pst, err := timeTool(b.ctx, tl.RealFFmpeg, filepath.Join(bd, "out"), replaceDir(cp.poster, cp.jobDir, bd))
				if err != nil {
					return fmt.Errorf("bare poster: %w", err)
				}
				bareMain[cl.Name] = append(bareMain[cl.Name], main)
				barePoster[cl.Name] = append(barePoster[cl.Name], pst)
				bareCPU[cl.Name] = append(bareCPU[cl.Name], (rusage(syscall.RUSAGE_CHILDREN) - c0).Seconds())
				return nil
			}
			first, second := doWorker, doBare
			if (run+i)%2 == 1 {
				first, second = doBare, doWorker
			}
			if err := first(); err != nil {
				return fmt.Errorf("%s: %w", cl.Name, err)
			}
			if err := second(); err != nil {
				return fmt.Errorf("%s: %w", cl.Name, err)
			}
			wt := workerT[cl.Name][len(workerT[cl.Name])-1]
			b.logf("videos run %d %s: worker %s, bare %s", run+1, cl.Name, secs(wt.e2e),
				secs(bareMain[cl.Name][len(bareMain[cl.Name])-1]+barePoster[cl.Name][len(barePoster[cl.Name])-1]))
		}
	}
	metricsAfter, _ := w.Metrics(b.ctx)

	// Per clip: worker end to end vs the bare encode (or remux) + poster. Transcoded and remuxed clips
	// are reported apart: a remux takes a fraction of a second, so the worker's fixed costs weigh far
	// more there.
	var rows [][]string
	type worstOf struct {
		r, cpu float64
		name   string
	}
	worst := map[string]*worstOf{"encode": {}, "remux": {}}
	shares := map[string]float64{}
	for _, cl := range clips {
		ts := workerT[cl.Name]
		e2e := bench.Median(pick(ts, func(t videoTimes) float64 { return t.e2e }))
		bare := bench.Median(sums(bareMain[cl.Name], barePoster[cl.Name]))
		r := e2e / bare
		cpuW, cpuB := bench.Median(pick(ts, func(t videoTimes) float64 { return t.cpu })), bench.Median(bareCPU[cl.Name])
		if wo := worst[caps[cl.Name].kind]; wo != nil && r > wo.r {
			wo.r, wo.cpu, wo.name = r, cpuW/cpuB, cl.Name
		}
		shares[cl.Name] = bench.Median(pick(ts, func(t videoTimes) float64 { return t.poster / t.e2e }))
		rows = append(rows, []string{cl.Name, mib(float64(fileSize(cl.Path))), caps[cl.Name].kind, secs(e2e), secs(bare), ratio(r),
			ms(e2e - bare),
			secs(bench.Median(pick(ts, func(t videoTimes) float64 { return t.main }))),
			secs(bench.Median(bareMain[cl.Name])),
			ms(bench.Median(pick(ts, func(t videoTimes) float64 { return t.probes }))),
			ms(bench.Median(pick(ts, func(t videoTimes) float64 { return t.poster }))),
			fmt.Sprintf("%.1f %%", 100*shares[cl.Name]),
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
	var encShare, remShare float64 = -1, -1
	var encName, remName string
	for _, cl := range clips {
		if !strings.HasPrefix(cl.Name, "1080p") {
			continue
		}
		s := shares[cl.Name]
		if caps[cl.Name].kind == "remux" {
			if s > remShare {
				remShare, remName = s, cl.Name
			}
		} else if s > encShare {
			encShare, encName = s, cl.Name
		}
	}
	if encName != "" {
		b.rep.row("videos", "poster share of job time, 1080p transcoded clip (worst)",
			fmt.Sprintf("%s: poster ffmpeg run ÷ publish → response", encName), fmt.Sprintf("%.1f %%", 100*encShare), "≤ 5 %", atMost(encShare, 0.05))
	}
	if remName != "" {
		b.rep.row("videos", "poster share of job time, 1080p remuxed clip",
			fmt.Sprintf("%s: poster ffmpeg run ÷ publish → response", remName), fmt.Sprintf("%.1f %%", 100*remShare), "≤ 5 %", atMost(remShare, 0.05))
	}

	overhead := b.wrapperOverhead(tl)
	b.rep.section("Videos: worker end to end vs bare ffmpeg",
		"%d s clips at 25 fps with audio (H.264/AAC MP4 with fast start, HEVC/AAC MOV, VP9/Opus WebM), one job at a time "+
			"(`--max-video-jobs 1`), medians of %d runs, worker and bare interleaved. *worker*: publish → response "+
			"(download with clamd INSTREAM, ffprobe ×3, encode or remux, poster, uploads). *bare*: the worker's own encode "+
			"(or remux, *path*) and poster commands, taken from its first job of the clip (ffmpeg and ffprobe wrapped with a "+
			"logging script; the wrapper costs %s per tool run, charged to the worker), run with only the scratch paths "+
			"changed.\n\n%s\n"+
			"*overhead* is the worker's end-to-end time minus the bare commands: roughly fixed per job, so the ratio "+
			"improves with longer clips. *worker probes* is the sum of its three ffprobe runs (the input in detection, "+
			"the input again in the transform, the output). *CPU s*: user + system CPU seconds of the whole job (the worker "+
			"process, its ffmpeg/ffprobe runs and clamd) and of the bare commands; less disturbed by other load than wall "+
			"time.\n\n%s",
		clipSeconds, b.runs, ms(overhead),
		table([]string{"clip", "file", "path", "worker e2e", "bare", "ratio", "overhead", "worker encode/remux",
			"bare encode/remux", "worker probes", "worker poster", "poster share", "CPU s worker / bare"}, rows),
		stageTable(metricsBefore, metricsAfter))
	for _, name := range []string{"1080p-hevc.mov", "1080p-h264.mp4"} {
		if ex, ok := caps[name]; ok {
			b.rep.command("# the worker's %s for %s (replayed bare with its own scratch dir), then its poster:\nffmpeg %s\nffmpeg %s",
				ex.kind, name, shellJoin(ex.main), shellJoin(ex.poster))
		}
	}
	return errors.Join(b.posterVariants(tl, caps, bareDirs, bareMain), b.remuxVsTranscode(tl, caps, bareDirs, bareMain))
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
	for _, r := range runs {
		switch r.Kind() {
		case "probe":
			t.probes += r.Took().Seconds()
		case "encode", "remux":
			t.main += r.Took().Seconds()
		case "poster":
			t.poster += r.Took().Seconds()
		}
	}
	return t, runs, nil
}

// capture finds the encode (or remux), poster and output-probe commands of one job.
func capture(runs []bench.ToolRun) (captured, error) {
	var cp captured
	var probes [][]string
	for _, r := range runs {
		switch k := r.Kind(); k {
		case "encode", "remux":
			if r.Exit == 0 { // a failed remux falls back to an encode
				cp.kind, cp.main = k, r.Args
			}
		case "poster":
			cp.poster = r.Args // the last poster run is the one that succeeded
		case "probe":
			probes = append(probes, r.Args)
		}
	}
	if cp.main == nil || cp.poster == nil || len(probes) == 0 {
		return cp, fmt.Errorf("tool log lacks the encode or remux, the poster or a probe (%d runs)", len(runs))
	}
	cp.probe = probes[len(probes)-1]
	i := slices.Index(cp.main, "-i")
	if i < 0 || i+1 >= len(cp.main) || !strings.HasSuffix(cp.main[i+1], "/input") {
		return cp, fmt.Errorf("%s command has no -i file:<job>/input: %q", cp.kind, cp.main)
	}
	cp.jobDir = strings.TrimSuffix(strings.TrimPrefix(cp.main[i+1], "file:"), "/input")
	return cp, nil
}

func replaceDir(args []string, from, to string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, from, to)
	}
	return out
}

// withOutput returns args with its last argument (the output) replaced.
func withOutput(args []string, out string) []string {
	args = slices.Clone(args)
	for i := len(args) - 1; i >= 0; i-- {
		if strings.HasPrefix(args[i], "file:") {
			args[i] = "file:" + out
			break
		}
	}
	return args
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

// posterVariants times the worker's poster command against key-frame-only decoding: on a transcoded
// 1080p output, also with a key frame forced at the poster time in the encode; on a remuxed one as it
// is (a stream copy cannot add key frames).
func (b *bencher) posterVariants(tl *bench.ToolLog, caps map[string]captured, bareDirs map[string]string, bareMain map[string][]float64) error {
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
		base := replaceDir(cp.poster, cp.jobDir, bd)
		in := slices.Index(base, "-i")
		ss := slices.Index(base, "-ss")
		if in < 0 || ss < 0 || ss > in {
			notes = append(notes, fmt.Sprintf("%s: the worker's poster has no `-ss T` before `-i` (%s); skipped", name, shellJoin(base)))
			continue
		}
		at := base[ss+1]
		skip := slices.Concat(base[:ss], []string{"-skip_frame", "nokey"}, base[ss:])
		skipNA := slices.Concat(base[:ss], []string{"-skip_frame", "nokey", "-noaccurate_seek"}, base[ss:])
		type variant struct {
			name string
			args []string
		}
		variants := []variant{
			{"the worker's: `-ss T -i` (decodes from the key frame before T up to T)", base},
			{"`-skip_frame nokey -ss T -i` (key frames only)", skip},
			{"`-skip_frame nokey -noaccurate_seek -ss T -i`", skipNA},
		}
		if cp.kind == "encode" {
			// The same encode with a key frame at the first frame at or after T (a plain time rounds to
			// the nearest frame, which may be before T, where an accurate seek to T skips it).
			keyedMP4 := filepath.Join(out, "video_kf.mp4")
			enc := replaceDir(cp.main, cp.jobDir, bd)
			f := lastIndex(enc, "-f")
			if f < 0 {
				return fmt.Errorf("encode command has no -f: %q", enc)
			}
			keyed := withOutput(slices.Concat(enc[:f], []string{"-force_key_frames", "expr:gte(t," + at + ")*eq(n_forced,0)"}, enc[f:]), keyedMP4)
			if _, err := timeTool(b.ctx, tl.RealFFmpeg, out, keyed); err != nil {
				return err
			}
			onKeyed := func(args []string) []string {
				args = slices.Clone(args)
				args[slices.Index(args, "-i")+1] = "file:" + keyedMP4
				return args
			}
			variants = append(variants,
				variant{"the worker's, on the encode with a key frame forced at T", onKeyed(base)},
				variant{"`-skip_frame nokey -ss T -i`, on the encode with a key frame forced at T: decodes one frame", onKeyed(skip)})
			notes = append(notes, fmt.Sprintf("%s: forcing the key frame (`-force_key_frames 'expr:gte(t,T)*eq(n_forced,0)'` "+
				"added to the worker's encode) made the MP4 %+.1f %% larger", name,
				100*(float64(fileSize(keyedMP4))/float64(fileSize(mp4))-1)))
			cmds = append(cmds, shellJoin(keyed), shellJoin(onKeyed(skip)))
		}
		var first float64
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
			rows = append(rows, []string{fmt.Sprintf("%s (%s, T = %s)", name, cp.kind, at), v.name, ms(med), ratio(first / med), got})
		}
	}
	ver, _ := timeToolN(b.ctx, tl.RealFFmpeg, os.TempDir(), []string{"-hide_banner", "-loglevel", "error", "-version"}, n)
	b.rep.section("Videos: poster variants",
		"On the 1080p outputs the bare replays wrote (%d s at 25 fps; the corpus clips and the worker's encodes use "+
			"x264's default GOP, so each has one key frame, at 0), T as the worker chose it, medians of %d runs. "+
			"`ffmpeg -version` alone takes %s (process start and library loading).\n\n%s\n%s",
		clipSeconds, n, ms(ver),
		table([]string{"output", "poster command", "time", "speed-up", "poster"}, rows),
		"- "+strings.Join(notes, "\n- "))
	if len(cmds) > 0 {
		b.rep.command("# poster experiment: the worker's encode plus a key frame forced at T, then the poster with -skip_frame nokey:\nffmpeg %s",
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
// (taken from the transcoded clip of the same resolution), all bare.
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
		transcode := withOutput(replaceDir(donor.main, donor.jobDir, bd), filepath.Join(out, "transcoded.mp4"))
		probe := withOutput(replaceDir(cp.probe, cp.jobDir, bd), filepath.Join(out, "video.mp4"))
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
			b.rep.command("# transcode of %s for the remux comparison (the worker's encode of the 1080p clip it transcodes):\nffmpeg %s", cl.Name, shellJoin(transcode))
		}
	}
	if worstName == "" {
		b.rep.row("videos", "fast path: remux vs transcode, H.264/AAC MP4", "**the worker remuxed no clip**", "n/a", "≥ 10×", "**MISS**")
		return nil
	}
	b.rep.row("videos", "fast path: transcode time ÷ (remux + ffprobe of the result), H.264/AAC MP4, worst clip",
		fmt.Sprintf("worst: %s; the worker's remux and output probe vs its encode command on the same input, bare", worstName),
		ratio(worst), "≥ 10×", atLeast(worst, 10))
	b.rep.section("Videos: remux vs transcode",
		"For the clips the worker remuxes (H.264/AAC in MP4/MOV within the caps): its remux (median of the bare replays "+
			"above) plus the ffprobe of the result it checks, against a transcode of the same input with the worker's "+
			"encode command for that resolution (medians of %d).\n\n%s",
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

func lastIndex(args []string, s string) int {
	for i := len(args) - 1; i >= 0; i-- {
		if args[i] == s {
			return i
		}
	}
	return -1
}
