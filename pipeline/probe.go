package pipeline

import (
	"context"

	"github.com/mediaworker/mediaworker/tracing"
	"github.com/mediaworker/mediaworker/transcoder"
	"go.opentelemetry.io/otel/codes"
)

// Probing a video beside its scan. The download streams the bytes to clamd as it writes them, but
// clamd finishes after the download (it scans at tens of MiB/s), and ffprobe spends ~100 ms starting
// up before it reads a byte: one after the other they were most of a remuxed clip's fixed cost. Both
// only read the downloaded file, so the probe starts as soon as the file is complete, and its answer
// is taken only once the scan has come back clean. An infected or unscannable upload ends the job
// first; its probe is cancelled (ffprobe killed with it) and whatever it found, success or failure,
// is dropped unread: nothing is transformed or reported from a file before its verdict. ffprobe runs
// on the upload exactly as it does after the scan: under its demuxer allow-list, resource limits and
// the job's context.

// pendingProbe is a probe started beside the scan.
type pendingProbe struct {
	cancel context.CancelFunc
	done   chan probeResult // buffered: the probe never waits for a reader
}

type probeResult struct {
	probe *transcoder.VideoProbe
	err   error
}

// startProbe starts probing the downloaded file, which its head (sniffed once: job.sniff) says is a
// video this job's lane transforms. Anything else (an image, a type we refuse, a video in the image
// lane, which detect routes) is left to detect, as before: Pipeline.scan calls the handler of the
// sniffed kind only, and only in its own lane.
func (h videoHandler) startProbe(ctx context.Context, j *job) {
	pctx, cancel := context.WithCancel(ctx)
	pp := &pendingProbe{cancel: cancel, done: make(chan probeResult, 1)}
	go func() {
		sctx, span := tracing.Tracer().Start(pctx, "probing")
		defer span.End()
		pr, err := h.videos.Probe(sctx, j.input)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		pp.done <- probeResult{pr, err}
	}()
	j.probing = pp
}

// probeVideo returns the probe started beside the scan, or probes now if none was.
func (h videoHandler) probeVideo(ctx context.Context, j *job) (*transcoder.VideoProbe, error) {
	pp := j.probing
	if pp == nil {
		return h.videos.Probe(ctx, j.input)
	}
	j.probing = nil
	defer pp.cancel()
	select {
	case res := <-pp.done:
		return res.probe, res.err
	case <-ctx.Done():
		<-pp.done // the probe's context is a child of ctx: it ends now
		return nil, ctx.Err()
	}
}

// stopProbe cancels a probe whose answer will not be used (the upload was infected, could not be
// scanned, or the job ended otherwise) and waits for it, so no ffprobe outlives its job.
func (j *job) stopProbe() {
	if pp := j.probing; pp != nil {
		j.probing = nil
		pp.cancel()
		<-pp.done
	}
}
