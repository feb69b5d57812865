package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/scanner"
)

// Downloading and scanning: the bytes go to the scratch file and to clamd in one pass, and an
// infected object is removed (or quarantined) and answered with a virus event.

// scanResult is clamd's answer on the bytes streamed to it during the download.
type scanResult struct {
	verdict scanner.Verdict
	err     error
}

// download writes the object to the scratch file and, in the same pass, streams the same bytes to
// clamd: the scan overlaps the download instead of following it. With a scanner that scans files in
// place (clamd on a unix socket), the download goes to the scratch file only and clamd is handed the
// finished file: clamd writes every stream to a temporary file before it scans anyway, so the scan
// starts no later, and costs it less. The verdict is collected by the next step; nothing transforms
// the file before it (a video's probe, which only reads it, starts when the download ends: probe.go).
func (f *fetcher) download(ctx context.Context, j *job) error {
	j.scanned = make(chan scanResult, 1)
	if ips, ok := f.scanner.(InPlaceScanner); ok && ips.ScansInPlace() {
		return f.downloadThenScan(ctx, j, ips)
	}
	pr, pw := io.Pipe()
	scanning := false
	// check looked the object up; j.info is what it found (the object is looked up once per job).
	info, err := objstore.DownloadStatted(ctx, f.store, j.info, j.input, f.cfg.MaxInputBytes,
		func(info objstore.Info) io.Writer {
			if info.Size == 0 {
				return nil // refused below; clamd has nothing to look at
			}
			scanning = true
			j.head = newHeadCopy(info.Size)
			go func() {
				v, err := f.scanner.Scan(ctx, pr, info.Size)
				pr.CloseWithError(errScanEnded) // a scan that ended early must not block the download
				j.scanned <- scanResult{v, err}
			}()
			return j.tee(info, pw)
		})
	pw.CloseWithError(err) // nil: the scanner sees the end of the stream
	if err != nil && scanning {
		// If clamd gave up first (down, over its limit), that is the cause to report, not the
		// download that could no longer write to it.
		if res := <-j.scanned; res.err != nil && !isTruncated(res.err) {
			j.scanned <- res
			return nil
		}
	}
	return f.downloaded(j, info, err)
}

// downloadThenScan is download for a scanner that scans files in place: the file first, then clamd.
func (f *fetcher) downloadThenScan(ctx context.Context, j *job, s InPlaceScanner) error {
	if err := f.downloadOnly(ctx, j); err != nil { // an empty object is refused there
		return err
	}
	go func() {
		v, err := s.ScanFile(ctx, j.input)
		j.scanned <- scanResult{v, err}
	}()
	return nil
}

// downloadOnly writes the object to the scratch file, keeping its head and hashing it, and scans
// nothing.
func (f *fetcher) downloadOnly(ctx context.Context, j *job) error {
	info, err := objstore.DownloadStatted(ctx, f.store, j.info, j.input, f.cfg.MaxInputBytes,
		func(info objstore.Info) io.Writer {
			j.head = newHeadCopy(info.Size)
			return j.tee(info)
		})
	return f.downloaded(j, info, err)
}

// tee is what the downloaded bytes go to besides the scratch file: the head copy, the hash (the
// answer's sha256 and the reuse memory's key) unless the store vouches for the digest itself, and
// others (the scanner's stream).
func (j *job) tee(info objstore.Info, others ...io.Writer) io.Writer {
	ws := append([]io.Writer{j.head}, others...)
	if len(info.SHA256) != sha256.Size {
		// The store does not check a digest of its own on the way (S3's ETag is no content hash).
		j.hash = sha256.New()
		ws = append(ws, j.hash)
	}
	return io.MultiWriter(ws...)
}

// downloaded classifies the download's error and records what it fetched.
func (f *fetcher) downloaded(j *job, info objstore.Info, err error) error {
	var tooLarge *objstore.TooLargeError
	switch {
	case err == nil:
	case errors.Is(err, objstore.ErrNotFound):
		return notFound(j.req)
	case objstore.IsPermanent(err):
		return storeRefused("downloading", err)
	case errors.As(err, &tooLarge):
		return tooLargeInput(tooLarge)
	default:
		return transient("downloading", err)
	}
	if info.Size == 0 {
		return refuse("downloading", emptyObject)
	}
	j.info = info
	switch {
	case j.hash != nil:
		j.sha256 = hex.EncodeToString(j.hash.Sum(nil))
	case len(info.SHA256) == sha256.Size:
		// The download completed, so the store checked the bytes against this digest (objstore.Info).
		j.sha256 = hex.EncodeToString(info.SHA256)
	}
	if f.observer != nil {
		f.observer.Transferred("in", info.Size)
	}
	return nil
}

var errScanEnded = errors.New("the scan ended before the download")

// headCopy keeps the first cap(buf) bytes written to it and accepts the rest unread: detection sniffs
// the head from memory instead of opening the downloaded file again.
type headCopy struct{ buf []byte }

// newHeadCopy keeps as much of an input of size bytes as detection sniffs.
func newHeadCopy(size int64) *headCopy { return &headCopy{buf: make([]byte, 0, min(size, sniffBytes))} }

func (h *headCopy) Write(p []byte) (int, error) {
	if room := cap(h.buf) - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// isTruncated says the scanner failed because its input stream failed (the download's fault).
func isTruncated(err error) bool {
	var se *scanner.Error
	return errors.As(err, &se) && se.Kind == scanner.Truncated
}

func (p *Pipeline) scan(ctx context.Context, j *job) error {
	// The file is complete and is sniffed now, once (sniff.go): a video's probe runs while clamd
	// finishes (probe.go). Its answer is read by detect, after a clean verdict, and dropped otherwise.
	if _, kind, err := j.sniff(); err == nil && (j.lane == "" || j.lane == kind) {
		if h, ok := p.kinds[kind]; ok {
			h.downloaded(ctx, j)
		}
	}
	v, err := p.in.verdict(ctx, j)
	if err != nil || v.Infected {
		j.stopProbe() // its answer is never read: kill ffprobe now, not when the job ends
	}
	switch {
	case err != nil:
		return err
	case v.Infected:
		return p.in.infected(ctx, j, v.Signature)
	}
	// Clean by today's signatures: bytes seen before need no transform (reuse.go).
	p.reuse.recall(ctx, j)
	return nil
}

// verdict waits for clamd's verdict on the downloaded bytes, counts it, and classes a scan that gave
// none.
func (f *fetcher) verdict(ctx context.Context, j *job) (scanner.Verdict, error) {
	var res scanResult
	select {
	case res = <-j.scanned:
	case <-ctx.Done():
		return scanner.Verdict{}, transient("scanning", ctx.Err())
	}
	v, err := res.verdict, res.err
	verdict := "clean"
	switch {
	case err == nil && v.Infected:
		verdict = "infected"
	case err == nil:
	case scanner.IsRefused(err):
		verdict = "refused"
	default:
		verdict = "error"
	}
	if f.observer != nil {
		f.observer.Scanned(verdict)
	}
	switch {
	case err == nil:
		return v, nil
	case scanner.IsRefused(err):
		return v, scanRefused(err)
	}
	return v, transient("scanning", err)
}

// infected removes (or quarantines) the job's object, which matched signature, and answers it with a
// virus event, on clamd's verdict.
func (f *fetcher) infected(ctx context.Context, j *job, signature string) error {
	ev := contracts.VirusEvent{
		MediaID: j.req.MediaID, S3Key: j.req.S3Key, S3Bucket: j.req.S3Bucket, MediaURL: j.req.MediaURL,
		VirusName: signature, DetectedAt: f.now().UTC().Format(time.RFC3339), ActionTaken: contracts.ActionDeleted,
	}
	if f.cfg.QuarantineBucket != "" {
		ev.ActionTaken = contracts.ActionQuarantined
	}
	if f.verdicts != nil {
		// Written before the object goes, so a redelivery that finds it gone still knows why.
		if err := f.verdicts.Remember(ctx, ev); err != nil {
			return transient("recording the virus verdict", err)
		}
	}
	if _, err := f.removeInfected(ctx, j); err != nil {
		// The scan will run again on the next delivery; the object is still where it was.
		return transient("removing infected object", err)
	}
	j.out = infectedOutcome(j.req, ev)
	return nil
}

func (f *fetcher) recall(ctx context.Context, req contracts.Request) (*contracts.VirusEvent, error) {
	if f.verdicts == nil {
		return nil, nil
	}
	ev, err := f.verdicts.Recall(ctx, req.MediaID)
	if err != nil || ev == nil || ev.S3Bucket != req.S3Bucket || ev.S3Key != req.S3Key {
		return nil, err
	}
	return ev, nil
}

func infectedOutcome(req contracts.Request, ev contracts.VirusEvent) Outcome {
	return Outcome{
		Kind:     Infected,
		Err:      fmt.Errorf("virus detected: %s", ev.VirusName),
		Response: failureResponse(req, "virus detected: "+ev.VirusName),
		Virus:    &ev,
	}
}

// removeInfected deletes the object, or moves it to the quarantine bucket under the same key: the
// version the job looked up (j.info, from check's Stat) and scanned, no other. On a versioned S3 bucket
// that version itself goes (a plain delete would hide it under a delete marker, readable by version);
// an upload that replaced it meanwhile is neither quarantined nor deleted (objstore.ErrChanged,
// transient: the next delivery looks again and scans the new one).
func (f *fetcher) removeInfected(ctx context.Context, j *job) (string, error) {
	if q := f.cfg.QuarantineBucket; q != "" {
		if err := objstore.CopyStatted(ctx, f.store, j.info, q, j.req.S3Key); err != nil {
			return "", fmt.Errorf("copying to quarantine bucket %q: %w", q, err)
		}
		if err := objstore.DeleteStatted(ctx, f.store, j.info); err != nil {
			return "", fmt.Errorf("deleting quarantined original: %w", err)
		}
		return contracts.ActionQuarantined, nil
	}
	if err := objstore.DeleteStatted(ctx, f.store, j.info); err != nil {
		return "", fmt.Errorf("deleting infected object: %w", err)
	}
	return contracts.ActionDeleted, nil
}
