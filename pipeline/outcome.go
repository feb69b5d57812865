// Package pipeline runs one media job: download → scan → detect → transform → upload. It composes the
// leaf capabilities (object store, scanner, transcoders) through interfaces declared here and returns an
// Outcome. It never acknowledges or publishes anything: the jetstream package maps outcomes to acks and
// events.
package pipeline

import (
	"fmt"

	"github.com/mediaworker/mediaworker/contracts"
)

// Kind is the one way a job ended.
type Kind int

const (
	// Success: every variant was uploaded; Response.Success is true.
	Success Kind = iota
	// Failed: a permanent failure (bad input, unsupported or corrupt media, over a limit). Retrying
	// cannot help; Response carries an error a person can act on.
	Failed
	// Infected: clamd found a signature. Virus is set, the object was deleted or quarantined, nothing was
	// transformed, and Response says "virus detected: <name>".
	Infected
	// Retry: a transient cause (store, clamd, disk, a crashed tool). The job may succeed if delivered
	// again. Response holds the failure response to publish if the ack layer gives up.
	Retry
	// Route: the request belongs to MediaKind's lane (triage's answer, or a lane job that found the
	// other kind after download). Nothing is answered yet; the request moves on.
	Route
	// GaveUp: the request is copied to the dead-letter stream with Reason, and Response, when it names
	// a mediaId, tells the API (a transient cause outlasted the deliveries, or the request is unparseable).
	GaveUp
)

func (k Kind) String() string {
	switch k {
	case Success:
		return "success"
	case Failed:
		return "failed"
	case Infected:
		return "infected"
	case Retry:
		return "retry"
	case Route:
		return "route"
	case GaveUp:
		return "gave_up"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Outcome is the result of one job, and everything its settlement publishes: Virus (Infected), Response
// (when its MediaID is set) and, for Route and GaveUp, the request itself to a lane or the DLQ.
type Outcome struct {
	Kind      Kind
	MediaKind MediaKind // image or video once detected, "" before; for Route the lane to go to
	MIME      string    // what detection found, "" before
	Response  contracts.Response
	Virus     *contracts.VirusEvent
	Err       error  // the cause, for Failed, Infected, Retry and GaveUp: the whole chain (ErrorDetail)
	Reason    string // GaveUp: why (the DLQ's Mw-Reason): ReasonParseError or ReasonMaxDeliveries
}

// Dead-letter reasons.
const (
	ReasonParseError    = "parse-error"
	ReasonMaxDeliveries = "max-deliveries"
)

// Every response the worker publishes starts here: one place to read what the API can be told.
// (internal/archtest holds this: no other file writes a contracts.Response literal.)

// newResponse is a job's answer before anything is known; a successful job fills it in as it goes
// (transform: Metadata, Warnings; upload: Processed, then Success).
func newResponse(req contracts.Request) contracts.Response {
	// Recipe is echoed only when the request named one: a seed client's answer stays the seed's. And
	// only a valid name: response.schema.json allows nothing else there (contracts.ParseRequest
	// already clears an invalid one from a refused request; this holds for every other path too).
	r := contracts.Response{MediaID: req.MediaID, OriginalURL: req.MediaURL, Recipe: req.Recipe}
	if r.Recipe != "" && contracts.ValidateName(r.Recipe) != nil {
		r.Recipe = ""
	}
	return withSource(r, req)
}

// withSource echoes an ingest-made request's source as metadata.source (and nothing for any other
// request). A job sets the answer's metadata as it goes, replacing it whole, so Process applies this
// again to what it returns.
func withSource(r contracts.Response, req contracts.Request) contracts.Response {
	if req.Source == nil {
		return r
	}
	md := contracts.Metadata{}
	if r.Metadata != nil {
		md = *r.Metadata
	}
	src := *req.Source
	md.Source = &src
	r.Metadata = &md
	return r
}

// failureResponse is the API's answer to a request that did not succeed.
func failureResponse(req contracts.Request, msg string) contracts.Response {
	r := newResponse(req)
	r.Success, r.Error = false, msg
	return r
}

// Routed sends the request to kind's lane.
func Routed(kind MediaKind, mime string) Outcome {
	return Outcome{Kind: Route, MediaKind: kind, MIME: mime}
}

// Refused settles a request that failed validation: answered and terminated when it names a mediaId
// (ParseError.Correlatable), dead-lettered at once when there is nobody to answer.
func Refused(req contracts.Request, err error) Outcome {
	if contracts.Correlatable(err) {
		return Outcome{Kind: Failed, Err: err, Response: failureResponse(req, err.Error())}
	}
	return Outcome{Kind: GaveUp, Err: err, Reason: ReasonParseError}
}

// GaveUpAfter is the one "gave up" policy, used by the retry path and by the max-deliveries advisory:
// the request goes to the DLQ with the cause's whole chain, and the API (if the request names a
// mediaId) hears why in the cause's public words (PublicMessage): a transient cause is the worker's
// trouble, and its chain names endpoints and scratch paths the API has no business with.
func GaveUpAfter(req contracts.Request, kind MediaKind, deliveries uint64, cause error) Outcome {
	out := Outcome{Kind: GaveUp, MediaKind: kind, Err: cause, Reason: ReasonMaxDeliveries}
	if req.MediaID != "" {
		out.Response = failureResponse(req, fmt.Sprintf("gave up after %d deliveries: %s", deliveries, PublicMessage(cause)))
	}
	return out
}

// Unpublishable replaces an outcome whose answer is larger than the NATS server accepts (size bytes,
// limit the server's max payload): the work cannot be told as it is, and redoing it would only build
// the same answer again, so the request ends as a permanent failure with a short answer that names
// the request and nothing it carried.
func Unpublishable(req contracts.Request, kind MediaKind, size, limit int) Outcome {
	err := fmt.Errorf("the answer to this request would be %d bytes, over the NATS server's limit of %d; shorten the request's fields (mediaUrl, s3Key)", size, limit)
	// originalUrl is required and a URI: the contract's stand-in for one that cannot be echoed.
	r := failureResponse(contracts.Request{MediaID: req.MediaID, MediaURL: "urn:uuid:" + req.MediaID}, err.Error())
	return Outcome{Kind: Failed, MediaKind: kind, Err: err, Response: r}
}
