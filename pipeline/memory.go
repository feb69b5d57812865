package pipeline

import (
	"context"
	"fmt"

	"github.com/mediaworker/mediaworker/transcoder"
)

// MemoryBudget admits jobs by the memory they are expected to hold (package membudget; the app
// wires one per lane). Slots count jobs, not bytes: without a budget two large decodes start as
// readily as two thumbnails. Acquire waits until n bytes fit (all of the budget, alone, when n is larger) or ctx
// ends; release gives them back and is harmless when called again.
type MemoryBudget interface {
	Acquire(ctx context.Context, n int64) (release func(), err error)
}

// ImageMemoryEstimator is an ImageTransformer that can tell, from the header, the peak memory of
// transforming an image into the variants of specs (transcoder.Images).
type ImageMemoryEstimator interface {
	EstimateMemory(srcPath string, specs []transcoder.ImageVariantSpec) int64
}

// VideoMemoryEstimator is a VideoTransformer that can tell the peak memory of transcoding a probed
// video (transcoder.Videos).
type VideoMemoryEstimator interface {
	EstimateMemory(probe *transcoder.VideoProbe) int64
}

// defaultJobMemory is what a job whose transformer gives no estimate is counted at: a 2048 px
// picture and libwebp's encoder.
const defaultJobMemory = 48 << 20

// admit waits until the job's expected memory fits the budget, after detection (which read the
// header or probed the video) and before the transform, the step that holds the memory. The job
// keeps its slot while it waits, and its delivery stays alive: the lane sends InProgress for the
// whole of Process. A job larger than the budget waits until it runs alone; the wait ends only
// with the job's context (a shutdown, a lost delivery), which makes it transient. The memory is
// given back when the transform ends (transform), or at cleanup.
func (p *Pipeline) admit(ctx context.Context, j *job) error {
	budget := p.budgetFor(j.kind)
	h, err := p.kinds.of(j)
	if budget == nil || err != nil {
		return nil // a kind without a handler is refused by transform
	}
	n := h.estimateMemory(j)
	release, err := budget.Acquire(ctx, n)
	if err != nil {
		return transientSaid("waiting for memory", jobStopped, fmt.Errorf("admitting a job of %d bytes: %w", n, err))
	}
	j.memory = release
	return nil
}

// budgetFor is the budget a job of kind takes from: its kind's own when it has one (the app gives
// each lane its own, so a large encode never holds the image lane's memory), the shared one otherwise.
func (p *Pipeline) budgetFor(kind MediaKind) MemoryBudget {
	if b := p.lanes[kind]; b != nil {
		return b
	}
	return p.memory
}

// releaseMemory gives back what admit took; harmless when there is nothing.
func (j *job) releaseMemory() {
	if j.memory != nil {
		j.memory()
		j.memory = nil
	}
}
