package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ToolLog wraps ffmpeg and ffprobe in small shell scripts that run the real tool and append one line
// per run to a log: the tool, start and end (ns since the epoch), exit status and every argument. The
// worker runs them through --ffmpeg/--ffprobe, so the benchmark learns the exact arguments the worker
// used (to replay them bare) and how long each step took (probe, encode, poster) without reading the
// worker's code. Each wrapped run costs a shell and two date(1) calls, a few ms (measured in the
// report); that cost is charged to the worker, never to the baseline.
type ToolLog struct {
	FFmpeg, FFprobe         string // wrapper scripts
	RealFFmpeg, RealFFprobe string // what they run
	Path                    string // the log
}

// NewToolLog writes the wrappers into dir.
func NewToolLog(dir string) (*ToolLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l := &ToolLog{Path: filepath.Join(dir, "tools.log")}
	for _, t := range []struct {
		name       string
		real, wrap *string
	}{{"ffmpeg", &l.RealFFmpeg, &l.FFmpeg}, {"ffprobe", &l.RealFFprobe, &l.FFprobe}} {
		p, err := exec.LookPath(t.name)
		if err != nil {
			return nil, fmt.Errorf("finding %s: %w", t.name, err)
		}
		if *t.real, err = filepath.Abs(p); err != nil {
			return nil, err
		}
		*t.wrap = filepath.Join(dir, t.name)
		// One printf per run, so lines of concurrent runs never interleave (O_APPEND).
		script := fmt.Sprintf(`#!/bin/sh
# Written by mwbench: run %[1]s and log the run (tool, start ns, end ns, status, args; tab-separated).
s=$(date +%%s%%N)
%[2]s "$@"
rc=$?
e=$(date +%%s%%N)
tab=$(printf '\t')
line="%[1]s${tab}${s}${tab}${e}${tab}${rc}"
for a in "$@"; do line="${line}${tab}${a}"; done
printf '%%s\n' "$line" >> %[3]s
exit $rc
`, t.name, shellQuote(*t.real), shellQuote(l.Path))
		if err := os.WriteFile(*t.wrap, []byte(script), 0o755); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ToolRun is one logged run.
type ToolRun struct {
	Tool       string // ffmpeg or ffprobe
	Start, End time.Time
	Exit       int
	Args       []string
}

// Took is the run's wall time.
func (r ToolRun) Took() time.Duration { return r.End.Sub(r.Start) }

// Kind names what the worker used the run for: probe, encode, poster, hls, remux or version. An
// encode may write the poster too (a second output, file:…/poster.jpg, of the same run): it is
// still an encode, so the encoder is looked for before the image output; only a run that writes
// nothing but the JPEG is a poster.
func (r ToolRun) Kind() string {
	joined := strings.Join(r.Args, " ")
	switch {
	case strings.Contains(joined, "-version"):
		return "version"
	case r.Tool == "ffprobe":
		return "probe"
	case strings.Contains(joined, "-f hls"): // a stream copy too: before remux
		return "hls"
	case strings.Contains(joined, "libx264"):
		return "encode"
	case strings.Contains(joined, "-c copy"):
		return "remux"
	case strings.Contains(joined, "image2") || strings.Contains(joined, "poster"):
		return "poster"
	}
	return "other"
}

// Files returns the paths of the run's file: arguments (inputs and outputs), in order.
func (r ToolRun) Files() []string {
	var out []string
	for _, a := range r.Args {
		if p, ok := strings.CutPrefix(a, "file:"); ok {
			out = append(out, p)
		}
	}
	return out
}

// Overlap is how long the runs a and b were both running.
func Overlap(a, b ToolRun) time.Duration {
	start, end := a.Start, a.End
	if b.Start.After(start) {
		start = b.Start
	}
	if b.End.Before(end) {
		end = b.End
	}
	return max(end.Sub(start), 0)
}

// Runs reads the runs logged so far.
func (l *ToolLog) Runs() ([]ToolRun, error) {
	f, err := os.Open(l.Path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs []ToolRun
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 4 {
			continue
		}
		s, err1 := strconv.ParseInt(fields[1], 10, 64)
		e, err2 := strconv.ParseInt(fields[2], 10, 64)
		rc, err3 := strconv.Atoi(fields[3])
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("bad tool log line %q", sc.Text())
		}
		runs = append(runs, ToolRun{Tool: fields[0], Start: time.Unix(0, s), End: time.Unix(0, e), Exit: rc,
			Args: fields[4:]})
	}
	return runs, sc.Err()
}

// RunsBetween returns the runs that started within [from, to].
func RunsBetween(runs []ToolRun, from, to time.Time) []ToolRun {
	var out []ToolRun
	for _, r := range runs {
		if !r.Start.Before(from) && !r.Start.After(to) {
			out = append(out, r)
		}
	}
	return out
}
