package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/bench"
)

// The worker's commands for one job of each path, as its tool log records them (transcoder/video.go:
// encode with its poster output, remux, poster).
const (
	job   = "/w/tmp/mw-job-1"
	input = "-nostdin -hide_banner -nostats -loglevel error -max_alloc 536870912 -threads 2 -protocol_whitelist file " +
		"-format_whitelist mov,mp4,m4a,3gp,3g2,mj2,matroska,webm"
	scale      = "[0:0]scale=w='if(gte(iw,ih),-2,min(1080,trunc(iw/2)*2))':h='if(gte(iw,ih),min(1080,trunc(ih/2)*2),-2)'"
	encodeTail = "-map 0:1 -c:v libx264 -preset veryfast -crf 23 -pix_fmt yuv420p -profile:v high -threads 2 -c:a aac " +
		"-b:a 128k -map_metadata -1 -map_chapters -1 -movflags +faststart -fs 4294967296 -f mp4 -y file:" + job + "/video.mp4"
	posterOut = "-map [poster] -frames:v 1 -q:v 3 -threads 1 -f image2 -update 1 -y file:" + job + "/poster.jpg"
	progress  = "-progress pipe:1 -nostats"
)

// fields splits the option runs above (none of which holds a quoted space).
func fields(s string) []string { return strings.Fields(s) }

func encodeArgs(withPoster bool) []string {
	graph := scale + "[video]"
	if withPoster {
		graph = scale + ",split=2[video][p];[p]trim=start=0.600,trim=end_frame=1,scale=w='min(1280,iw)':h=-2[poster]"
	}
	args := slices.Concat(fields(input), []string{"-t", "3600", "-i", "file:" + job + "/input",
		"-filter_threads", "2", "-filter_complex", graph, "-map", "[video]"}, fields(encodeTail))
	if withPoster {
		args = append(args, fields(posterOut)...)
	}
	return append(args, fields(progress)...)
}

func posterArgs(mp4 string) []string {
	return slices.Concat(fields(input), []string{"-skip_frame", "noref", "-ss", "0.600", "-i", "file:" + mp4, "-map", "0:v:0", "-frames:v", "1",
		"-vf", "scale=w='min(1280,iw)':h=-2", "-q:v", "3", "-f", "image2", "-update", "1", "-y", "file:" + job + "/poster.jpg"})
}

func TestKind(t *testing.T) {
	remux := slices.Concat(fields(input), []string{"-t", "3600", "-i", "file:" + job + "/input", "-map", "0:0", "-c", "copy",
		"-f", "mp4", "-y", "file:" + job + "/video.mp4"})
	for _, c := range []struct {
		run  bench.ToolRun
		want string
	}{
		{bench.ToolRun{Tool: "ffmpeg", Args: encodeArgs(true)}, "encode"}, // its second output is the poster
		{bench.ToolRun{Tool: "ffmpeg", Args: encodeArgs(false)}, "encode"},
		{bench.ToolRun{Tool: "ffmpeg", Args: remux}, "remux"},
		{bench.ToolRun{Tool: "ffmpeg", Args: posterArgs(job + "/video.mp4")}, "poster"},
		{bench.ToolRun{Tool: "ffprobe", Args: []string{"-print_format", "json", "file:" + job + "/video.mp4"}}, "probe"},
	} {
		if got := c.run.Kind(); got != c.want {
			t.Errorf("Kind(%s) = %s, want %s", shellJoin(c.run.Args), got, c.want)
		}
	}
}

func TestWithoutPosterOutput(t *testing.T) {
	got, ok := withoutPosterOutput(encodeArgs(true))
	if !ok || !slices.Equal(got, encodeArgs(false)) {
		t.Errorf("withoutPosterOutput = %s, %t\nwant %s", shellJoin(got), ok, shellJoin(encodeArgs(false)))
	}
	if _, ok := withoutPosterOutput(encodeArgs(false)); ok {
		t.Error("withoutPosterOutput found a poster output in an encode without one")
	}
}

func TestPosterCommand(t *testing.T) {
	got, err := posterCommand(encodeArgs(true))
	if want := posterArgs(job + "/video.mp4"); err != nil || !slices.Equal(got, want) {
		t.Errorf("posterCommand = %s, %v\nwant %s", shellJoin(got), err, shellJoin(want))
	}
}

func TestBareArgs(t *testing.T) {
	got := bareArgs(encodeArgs(true), job, "/bare")
	files := bench.ToolRun{Args: got}.Files()
	want := []string{"/bare/input", "/bare/out/video.mp4", "/bare/out/poster.jpg"}
	if !slices.Equal(files, want) {
		t.Errorf("files of the bare encode = %q, want %q", files, want)
	}
	moved, err := withFile(got, "video.mp4", "/bare/out/x.mp4")
	if err != nil || !slices.Equal(bench.ToolRun{Args: moved}.Files(), []string{"/bare/input", "/bare/out/x.mp4", "/bare/out/poster.jpg"}) {
		t.Errorf("withFile moved the wrong output: %q, %v", bench.ToolRun{Args: moved}.Files(), err)
	}
}

// The worker's commands since it chooses the poster among candidates (transcoder/video_poster.go):
// the encode's poster branch selects five frames, each written as a JPEG and its luma plane, named
// relative to the job's directory; the remux path's run writes one of each.
const (
	candidatesChain = "scale=w='if(gte(iw,ih),min(1280,iw),-2)':h='if(gte(iw,ih),-2,min(1280,ih))',split=2[pjpeg][pl];[pl]extractplanes=y[pluma]"
)

func candidateOutputs(frames string) []string {
	return fields("-map [pjpeg] -frames:v " + frames + " -fps_mode passthrough -c:v mjpeg -threads 1 -q:v 3 -f image2 -start_number 1 -y file:poster-%d.jpg " +
		"-map [pluma] -frames:v " + frames + " -fps_mode passthrough -c:v pgm -threads 1 -f image2 -start_number 1 -y file:poster-%d.pgm")
}

func candidatesEncodeArgs(withPoster bool) []string {
	graph := scale + "[video]"
	if withPoster {
		graph = scale + ",split=2[video][p];[p]select='gte(t,0.600+selected_n*0.600)'," + candidatesChain
	}
	args := slices.Concat(fields(input), []string{"-t", "3600", "-i", "file:" + job + "/input",
		"-filter_threads", "2", "-filter_complex", graph, "-map", "[video]"}, fields(encodeTail))
	if withPoster {
		args = append(args, candidateOutputs("5")...)
	}
	return append(args, fields(progress)...)
}

func TestCandidatesEncode(t *testing.T) {
	enc := candidatesEncodeArgs(true)
	if k := (bench.ToolRun{Tool: "ffmpeg", Args: enc}).Kind(); k != "encode" {
		t.Errorf("Kind = %s, want encode", k)
	}
	if got := runKinds([]bench.ToolRun{{Tool: "ffmpeg", Args: enc}}); got != "encode+poster" {
		t.Errorf("runKinds = %s, want encode+poster", got)
	}
	got, ok := withoutPosterOutput(enc)
	if !ok || !slices.Equal(got, candidatesEncodeArgs(false)) {
		t.Errorf("withoutPosterOutput = %s, %t\nwant %s", shellJoin(got), ok, shellJoin(candidatesEncodeArgs(false)))
	}
	want := slices.Concat(fields(input), []string{"-skip_frame", "noref", "-ss", "0.600", "-i", "file:" + job + "/video.mp4",
		"-filter_complex", "[0:v:0]null," + candidatesChain}, candidateOutputs("1"))
	if got, err := posterCommand(enc); err != nil || !slices.Equal(got, want) {
		t.Errorf("posterCommand = %s, %v\nwant %s", shellJoin(got), err, shellJoin(want))
	}
	files := bench.ToolRun{Args: bareArgs(enc, job, "/bare")}.Files()
	if w := []string{"/bare/input", "/bare/out/video.mp4", "/bare/out/poster-%d.jpg", "/bare/out/poster-%d.pgm"}; !slices.Equal(files, w) {
		t.Errorf("files of the bare encode = %q, want %q", files, w)
	}
}

// The bare side replays the worker's ffprobe of the upload (issue 37): capture keeps its arguments,
// not those of a probe of the output, and bareArgs points them at the bare input.
func TestCaptureKeepsTheInputProbe(t *testing.T) {
	probeArgs := fields("-hide_banner -loglevel error -max_alloc 536870912 -protocol_whitelist file " +
		"-format_whitelist mov,mp4,m4a,3gp,3g2,mj2,matroska,webm -print_format json -show_format -show_streams file:" + job + "/input")
	runs := []bench.ToolRun{
		{Tool: "ffprobe", Args: probeArgs},
		{Tool: "ffmpeg", Args: encodeArgs(true)},
		{Tool: "ffprobe", Args: []string{"-print_format", "json", "file:" + job + "/video.mp4"}},
	}
	cp, err := capture(runs)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cp.inputProbe, probeArgs) {
		t.Fatalf("inputProbe = %q, want the probe of the upload %q", cp.inputProbe, probeArgs)
	}
	bare := bareArgs(cp.inputProbe, cp.jobDir, "/bare")
	if files := (bench.ToolRun{Args: bare}).Files(); !slices.Equal(files, []string{"/bare/input"}) {
		t.Errorf("the bare probe reads %q, want the bare input", files)
	}
	if !slices.Equal(bare[:len(bare)-1], probeArgs[:len(probeArgs)-1]) {
		t.Errorf("the bare probe's options differ from the worker's: %q", bare)
	}
}
