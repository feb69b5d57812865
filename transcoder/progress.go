package transcoder

import (
	"bytes"
	"context"
	"strconv"

	"github.com/mediaworker/mediaworker/progress"
)

// progressWriter reads ffmpeg's `-progress pipe:1` key=value lines from stdout and reports
// out_time_us against the input's duration. Lines are short; a partial one waits for its newline.
type progressWriter struct {
	ctx      context.Context
	duration float64 // seconds; 0 when unknown (no reports then)
	pending  []byte
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.pending = append(w.pending, p...)
	for {
		i := bytes.IndexByte(w.pending, '\n')
		if i < 0 {
			break
		}
		w.line(bytes.TrimSpace(w.pending[:i]))
		w.pending = w.pending[i+1:]
	}
	if len(w.pending) > 4096 { // not ffmpeg's progress format: don't grow without bound
		w.pending = w.pending[:0]
	}
	return len(p), nil
}

func (w *progressWriter) line(l []byte) {
	k, v, ok := bytes.Cut(l, []byte("="))
	if !ok || w.duration <= 0 {
		return
	}
	switch string(k) {
	case "out_time_us":
		us, err := strconv.ParseInt(string(v), 10, 64)
		if err == nil && us >= 0 {
			progress.Report(w.ctx, float64(us)/1e6/w.duration)
		}
	case "progress":
		if string(v) == "end" {
			progress.Report(w.ctx, 1)
		}
	}
}
