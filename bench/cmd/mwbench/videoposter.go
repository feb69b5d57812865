package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mediaworker/mediaworker/bench"
)

// posterVariants times a separate poster run against key-frame-only decoding: on a remuxed 1080p
// output the worker's own poster command; on a transcoded one, whose encode writes the poster itself,
// the command the worker's remux path would run (built from the encode's poster branch), next to
// what the poster output adds to the encode, and also with a key frame forced at the poster time in
// the encode.
func (b videosPhase) posterVariants(tl *bench.ToolLog, caps map[string]captured, bareDirs map[string]string,
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
		var worker []string
		workerName := "the worker's: `-skip_frame noref -ss T -i` (decodes the reference frames from the key frame before T up to T)"
		if cp.poster != nil {
			worker = bareArgs(cp.poster, cp.jobDir, bd)
		} else {
			var err error
			if worker, err = posterCommand(bareArgs(cp.main, cp.jobDir, bd)); err != nil {
				return err
			}
			workerName = "a separate run on the MP4, as the worker's remux path runs one on an H.264 upload: `-skip_frame noref -ss T -i` (decodes the reference frames from the key frame before T up to T)"
		}
		// base decodes every frame: the worker's command without its -skip_frame (the worker's poster
		// before it skipped non-reference frames); the other variants start from it.
		base := slices.Clone(worker)
		if k := slices.Index(base, "-skip_frame"); k >= 0 && k+1 < len(base) {
			base = slices.Delete(base, k, k+2)
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
			variant{"`-ss T -i`, every frame decoded (from the key frame before T up to T)", base},
			variant{workerName, worker},
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
			for range n {
				removePosters(out)
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
			if sz := fileSize(posterFile(out)); sz > 0 {
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
			"poster is a second output of its encode. So on the transcoded output the `-skip_frame noref -ss T -i` row times the command "+
			"the worker's remux path would run (`poster()` in transcoder/video_poster.go, built from the encode's poster "+
			"branch: same T and scale), and the last row what the worker actually pays. The first row of each output "+
			"decodes every frame, as the worker's poster run did before it skipped non-reference frames. *speed-up* is against the first "+
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
// result, if the worker ran one) with a transcode of the same input by the worker's encode command
// (taken from the transcoded clip of the same resolution, without its poster output: the poster is
// left out on both sides), all bare.
func (b videosPhase) remuxVsTranscode(tl *bench.ToolLog, caps map[string]captured, bareDirs map[string]string, bareMain map[string][]float64) error {
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
		var tr, prb []float64
		for range b.runs {
			t1, err := timeTool(b.ctx, tl.RealFFmpeg, out, transcode)
			if err != nil {
				return err
			}
			tr = append(tr, t1)
			if cp.probe == nil { // the worker reads the remux's header in Go: nothing to replay
				continue
			}
			// of bd/out/video.mp4, the bare remux's output
			t2, err := timeTool(b.ctx, tl.RealFFprobe, out, bareArgs(cp.probe, cp.jobDir, bd))
			if err != nil {
				return err
			}
			prb = append(prb, t2)
		}
		rem := bench.Median(bareMain[cl.Name])
		probeCol, fast := "none (header read in Go)", rem
		if len(prb) > 0 {
			probeCol, fast = ms(bench.Median(prb)), rem+bench.Median(prb)
		}
		r := bench.Median(tr) / fast
		if r < worst {
			worst, worstName = r, cl.Name
		}
		rows = append(rows, []string{cl.Name, secs(bench.Median(tr)), ms(rem), probeCol, ratio(r),
			fmt.Sprintf("%.1f / %.1f MiB", float64(fileSize(filepath.Join(out, "video.mp4")))/(1<<20), float64(fileSize(filepath.Join(out, "transcoded.mp4")))/(1<<20))})
		if strings.HasPrefix(cl.Name, "1080p") {
			b.rep.command("# transcode of %s for the remux comparison (the worker's encode of the 1080p clip it transcodes, without its poster output):\nffmpeg %s", cl.Name, shellJoin(transcode))
		}
	}
	if worstName == "" {
		b.rep.row("videos", "fast path: remux vs transcode, H.264/AAC MP4", "**the worker remuxed no clip**", "n/a", "≥ 10×", "**MISS**")
		return nil
	}
	b.rep.row("videos", "fast path: transcode time ÷ (remux + any ffprobe of the result), H.264/AAC MP4, worst clip",
		fmt.Sprintf("worst: %s; the worker's remux (and output probe, if it ran one) vs its encode command (without the poster output) on the same input, bare", worstName),
		ratio(worst), "≥ 10× on every clip (issue 13)", atLeast(worst, 10))
	b.rep.section("Videos: remux vs transcode",
		"For the clips the worker remuxes (H.264/AAC in MP4/MOV within the caps): its remux (median of the bare replays "+
			"above) plus the ffprobe of the result if the worker ran one (it reads the MP4 header of a remux, like that "+
			"of a transcode, in Go), against a transcode of the same input with the worker's "+
			"encode command for that resolution (medians of %d). The poster is left out on both sides: the encode's "+
			"poster output is dropped, and the remux path's poster run, side by side with the remux in the worker, is "+
			"priced in the first table.\n\n%s",
		b.runs, table([]string{"clip", "transcode", "remux", "ffprobe of the result", "transcode ÷ (remux + probe)", "remuxed / transcoded size"}, rows))
	return nil
}
