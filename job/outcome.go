package job

import (
	"fmt"

	"github.com/mediaworker/mediaworker/contracts"
)

// Ending is the one way a job ended (an Outcome's Kind).
type Ending int

const (
	// Success: every variant was uploaded; Response.Success is true.
	Success Ending = iota
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

func (k Ending) String() string {
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
	Kind      Ending
	MediaKind Kind   // image or video once detected, "" before; for Route the lane to go to
	MIME      string // what detection found, "" before
	Response  contracts.Response
	Virus     *contracts.VirusEvent
	Err       error  // the cause, for Failed, Infected, Retry and GaveUp: the whole chain (Words.Detail)
	Reason    string // GaveUp: why (the DLQ's Mw-Reason): ReasonParseError or ReasonMaxDeliveries
}

// Dead-letter reasons.
const (
	ReasonParseError    = "parse-error"
	ReasonMaxDeliveries = "max-deliveries"
)

// Routed sends the request to kind's lane.
func Routed(kind Kind, mime string) Outcome {
	return Outcome{Kind: Route, MediaKind: kind, MIME: mime}
}

// Refused settles a request that failed validation: answered and terminated when it names a mediaId
// (ParseError.Correlatable), dead-lettered at once when there is nobody to answer.
func Refused(req contracts.Request, err error) Outcome {
	if contracts.Correlatable(err) {
		return Outcome{Kind: Failed, Err: err, Response: FailureResponse(req, err.Error())}
	}
	return Outcome{Kind: GaveUp, Err: err, Reason: ReasonParseError}
}

// GaveUpAfter is the one "gave up" policy, used by the retry path and by the max-deliveries advisory:
// the request goes to the DLQ with the cause's whole chain, and the API (if the request names a
// mediaId) hears why in the cause's public words (public, Words.Public of cause): a transient cause
// is the worker's trouble, and its chain names endpoints and scratch paths the API has no business with.
func GaveUpAfter(req contracts.Request, kind Kind, deliveries uint64, cause error, public string) Outcome {
	out := Outcome{Kind: GaveUp, MediaKind: kind, Err: cause, Reason: ReasonMaxDeliveries}
	if req.MediaID != "" {
		out.Response = FailureResponse(req, fmt.Sprintf("gave up after %d deliveries: %s", deliveries, public))
	}
	return out
}

// Unpublishable replaces an outcome whose answer is larger than the NATS server accepts (size bytes,
// limit the server's max payload): the work cannot be told as it is, and redoing it would only build
// the same answer again, so the request ends as a permanent failure with a short answer that names
// the request and nothing it carried.
func Unpublishable(req contracts.Request, kind Kind, size, limit int) Outcome {
	err := fmt.Errorf("the answer to this request would be %d bytes, over the NATS server's limit of %d; shorten the request's fields (mediaUrl, s3Key)", size, limit)
	// originalUrl is required and a URI: the contract's stand-in for one that cannot be echoed.
	r := FailureResponse(contracts.Request{MediaID: req.MediaID, MediaURL: "urn:uuid:" + req.MediaID}, err.Error())
	return Outcome{Kind: Failed, MediaKind: kind, Err: err, Response: r}
}
