package pipeline

import (
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/facts"
)

// A successful job's answer is built here, once, from what the job carries: the steps before only
// gather (the kind's transform: made; the upload: each output's size and URL; the reuse memory: what
// it recalled) and nothing else writes the response. A failure's answer is fail's
// (failureResponse), an infected upload's infectedOutcome, a routed one's Routed.

// made is what a transform made (or the reuse memory recalled): the files to upload and what the
// answer says of the asset.
type made struct {
	outs     []output
	metadata *contracts.Metadata // nil: none
	facts    *facts.Facts        // the asset's facts (an image's, a video poster's); nil: none
	warnings []string
	// processed lists the stored variants, in order: filled in by upload (or by the reuse memory's
	// copies).
	processed []contracts.Variant
}

// respond fills in the answer of a job that succeeded.
func (j *job) respond() {
	r := &j.out.Response
	r.Metadata = j.made.metadata
	j.addFacts(j.made.facts)
	r.Warnings = append(r.Warnings, j.made.warnings...)
	r.Processed = j.made.processed
	r.Success = true
}
