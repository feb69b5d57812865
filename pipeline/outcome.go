// Package pipeline runs one media job: download → scan → detect → transform → upload. It composes the
// leaf capabilities (object store, scanner, transcoders) through interfaces declared here and returns an
// Outcome. It never acknowledges or publishes anything: the jetstream package maps outcomes to acks and
// events.
package pipeline

import (
	"github.com/mediaworker/mediaworker/contracts"
	vocab "github.com/mediaworker/mediaworker/job" // the job's vocabulary; "job" here is one running job
)

// The job's vocabulary lives in package job, which jetstream shares without importing the pipeline;
// these aliases keep the pipeline's own names for its callers.

// Kind is the one way a job ended.
type Kind = vocab.Ending

const (
	Success  = vocab.Success
	Failed   = vocab.Failed
	Infected = vocab.Infected
	Retry    = vocab.Retry
	Route    = vocab.Route
	GaveUp   = vocab.GaveUp
)

// Outcome is the result of one job (job.Outcome).
type Outcome = vocab.Outcome

// Dead-letter reasons.
const (
	ReasonParseError    = vocab.ReasonParseError
	ReasonMaxDeliveries = vocab.ReasonMaxDeliveries
)

// Responses are built in package job (job/response.go): these are the pipeline's short names.

func newResponse(req contracts.Request) contracts.Response { return vocab.NewResponse(req) }

func withSource(r contracts.Response, req contracts.Request) contracts.Response {
	return vocab.WithSource(r, req)
}

func failureResponse(req contracts.Request, msg string) contracts.Response {
	return vocab.FailureResponse(req, msg)
}

// Routed sends the request to kind's lane.
func Routed(kind MediaKind, mime string) Outcome { return vocab.Routed(kind, mime) }

// Refused settles a request that failed validation (job.Refused).
func Refused(req contracts.Request, err error) Outcome { return vocab.Refused(req, err) }

// GaveUpAfter is the one "gave up" policy (job.GaveUpAfter), told in the pipeline's public words
// (PublicMessage).
func GaveUpAfter(req contracts.Request, kind MediaKind, deliveries uint64, cause error) Outcome {
	return vocab.GaveUpAfter(req, kind, deliveries, cause, PublicMessage(cause))
}

// Unpublishable replaces an outcome whose answer is larger than the NATS server accepts
// (job.Unpublishable).
func Unpublishable(req contracts.Request, kind MediaKind, size, limit int) Outcome {
	return vocab.Unpublishable(req, kind, size, limit)
}
