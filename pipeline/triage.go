package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore"
)

// Triage is the cheap first look at a request: the object is looked up and its first bytes sniffed
// (one ranged read, no download, no scratch space), and the outcome routes it to its kind's lane. What
// can be told without the whole file ends here: missing, empty, too large (none of them can be scanned).
// Every other outcome of triage is Retry (the store is down or stalled).
func (p *Pipeline) Triage(ctx context.Context, req contracts.Request) Outcome {
	j := &job{req: req}
	j.ctx, j.cancel = context.WithTimeoutCause(ctx, p.cfg.JobTimeout, ErrStalled)
	defer j.cancel()
	defer p.scratch.join()() // the kept scratch dirs stay for the job this request becomes (scratch.go)
	j.out = Outcome{Kind: Success}
	start := p.now()
	out := p.triage(j)
	if p.observer != nil {
		p.observer.StageDone(out.MediaKind, "triaging", p.now().Sub(start), out.Err)
	}
	return out
}

func (p *Pipeline) triage(j *job) Outcome {
	stopped := func(err error) error {
		if j.ctx.Err() != nil {
			return p.stopped(j.ctx, "triaging", p.cfg.JobTimeout)
		}
		return err
	}
	info, err := p.in.stat(j.ctx, j)
	if err != nil {
		return p.fail(j, stopped(err))
	}
	if j.out.Kind == Infected { // removed on an earlier delivery
		return j.out
	}
	// The version the stat found, without a second lookup where the store can (objstore.StattedGetter).
	head, err := objstore.ReadHeadStatted(j.ctx, p.in.store, info, SniffBytes)
	if err != nil {
		if objstore.IsPermanent(err) {
			return p.fail(j, storeRefused("downloading", err))
		}
		return p.fail(j, stopped(transient("downloading", err)))
	}
	mime, kind, err := DetectBytes(head)
	if err == nil {
		recipe, _ := p.cfg.recipe(j.req) // known: stat refused an unknown one
		err = documentsRefused(recipe, mime, kind)
	}
	if err != nil {
		// Not a type we transform, but still scanned before it is refused: an infected upload of any
		// type is reported and removed (outcome "infected"), never left in the bucket as merely
		// "unsupported". The image lane is the cheap one; its detection refuses the type after the scan.
		return Routed(Image, mime)
	}
	return Routed(kind, mime)
}

// stat looks the object up and refuses what is not an upload (see notAnInput), missing, empty or over
// the input cap. A missing object whose verdict is remembered was infected and removed on an earlier
// delivery: j.out says so again. Triage and the lanes both start here.
func (f *fetcher) stat(ctx context.Context, j *job) (objstore.Info, error) {
	if err := f.notAnInput(j.req, objstore.Info{}); err != nil {
		return objstore.Info{}, err // before the store is asked anything
	}
	info, err := f.store.Stat(ctx, j.req.S3Bucket, j.req.S3Key)
	switch {
	case err == nil:
	case errors.Is(err, objstore.ErrInvalidName):
		// Before "not found", which a read of an impossible name also matches: the name is the cause.
		return info, storeRefused("downloading", err)
	case errors.Is(err, objstore.ErrNotFound):
		if ev, rerr := f.recall(ctx, j.req); rerr != nil {
			return info, transient("recalling an earlier verdict", rerr)
		} else if ev != nil {
			j.out = infectedOutcome(j.req, *ev)
			return info, nil
		}
		return info, notFound(j.req)
	case objstore.IsPermanent(err):
		return info, storeRefused("downloading", err)
	default:
		return info, transient("downloading", err)
	}
	info.Bucket, info.Key = j.req.S3Bucket, j.req.S3Key // what the download reads, whatever the store filled in
	if err := f.notAnInput(j.req, info); err != nil {
		return info, err
	}
	if info.Size > f.cfg.MaxInputBytes {
		return info, tooLargeInput(&objstore.TooLargeError{Size: info.Size, Limit: f.cfg.MaxInputBytes})
	}
	if info.Size == 0 {
		return info, refuse("downloading", emptyObject)
	}
	return info, nil
}

// notAnInput refuses a request for something the worker keeps or wrote rather than an upload: an object
// in the quarantine bucket (scanning it again would copy it onto itself, delete it and report it
// "quarantined"), or, once info is known, an object the worker uploaded as a variant (an API that
// requests every new object of a bucket would otherwise feed the worker its own outputs, three more for
// each, for ever). The refusal is a request's (contracts.ParseError): answered, never retried.
func (f *fetcher) notAnInput(req contracts.Request, info objstore.Info) error {
	if _, err := f.cfg.recipe(req); err != nil {
		return err // a recipe this worker does not know: nothing to make, so nothing is fetched
	}
	if q := f.cfg.QuarantineBucket; q != "" && req.S3Bucket == q {
		return &contracts.ParseError{Field: "s3Bucket", Correlatable: true,
			Reason: fmt.Sprintf("is the worker's quarantine bucket %q: quarantined files are never processed again", q)}
	}
	if info.Variant {
		return &contracts.ParseError{Field: "s3Key", Correlatable: true,
			Reason: "names an output of this worker (a variant it uploaded), not an upload"}
	}
	return nil
}
