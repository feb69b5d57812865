package pipeline

import (
	"context"
	"errors"

	"github.com/mediaworker/mediaworker/transcoder"
)

// Kinds are handlers. What differs between an image and a video job (what is checked after
// detection, the memory its transform is expected to hold and which budget it takes from, whether
// its transform is watched for progress, the transform itself) is its kind's handler, one file each
// (kind_image.go, kind_video.go). The steps of Process name no kind: they look the job's up here. A
// new kind is one more handler file, which registers itself (registerKind), plus its recognition in
// detect.go.

// kindHandler is one kind's part of a job.
type kindHandler interface {
	// downloaded is told the upload is on the scratch disk and sniffed, before clamd's verdict: work
	// that only reads the file may start (a video's probe); its answer is taken by check, after a
	// clean verdict, and dropped otherwise (job.cleanup).
	downloaded(ctx context.Context, j *job)
	// check refuses, after detection and before memory is taken, what the kind's limits refuse from
	// the file's structure alone, and learns what the estimate needs (a video's probe).
	check(ctx context.Context, j *job) error
	// estimateMemory is the job's expected peak, from what check learned.
	estimateMemory(j *job) int64
	// watched says whether the transform reports progress (stall.go's watchdog), or runs in calls
	// that cannot be interrupted (libvips), bounded by limits checked before a pixel is decoded.
	watched() bool
	// transform makes the kind's outputs in dir and says what the answer tells of the asset.
	transform(ctx context.Context, j *job, dir string) (made, error)
}

// kinds are the handlers of the kinds a pipeline transforms, by kind.
type kinds map[MediaKind]kindHandler

// kindMakers make the handler of each kind this pipeline transforms from its dependencies. Each kind's
// file registers its own (registerKind, in its init), so a kind is added by adding its file.
var kindMakers = map[MediaKind]func(Deps) kindHandler{}

// registerKind makes kind transformable, by the handler makeHandler makes.
func registerKind(kind MediaKind, makeHandler func(Deps) kindHandler) {
	if _, dup := kindMakers[kind]; dup {
		panic("pipeline: kind " + string(kind) + " registered twice") // a programming error, at init
	}
	kindMakers[kind] = makeHandler
}

// kindHandlers makes the handler of every registered kind, from the pipeline's dependencies.
func kindHandlers(d Deps) kinds {
	ks := make(kinds, len(kindMakers))
	for kind, makeHandler := range kindMakers {
		ks[kind] = makeHandler(d)
	}
	return ks
}

// handler is the handler of the job's kind, or the refusal of a kind this pipeline does not transform.
func (ks kinds) of(j *job) (kindHandler, error) {
	if h, ok := ks[j.kind]; ok {
		return h, nil
	}
	return nil, refuse("transforming", "unsupported media type: "+j.mime)
}

// classed classes a transformer's error in stage: the input's fault (transcoder.IsBadInput) is
// permanent, in the transcoder's words for the person who uploaded the file (transcoder.Error: its
// message, set where it refused the input); anything else (a tool, the machine) transient.
func classed(stage string, err error) *Error {
	var te *transcoder.Error
	if errors.As(err, &te) && te.BadInput {
		return refusedBy(stage, te.Error(), err) // a bad input's Error() is its message for people (transcoder.Error)
	}
	return transient(stage, err)
}
