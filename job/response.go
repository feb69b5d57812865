package job

import "github.com/mediaworker/mediaworker/contracts"

// Every response the worker publishes starts here: one place to read what the API can be told.
// (internal/archtest holds this: no other file writes a contracts.Response literal.)

// NewResponse is a job's answer before anything is known; a successful job fills it in as it goes
// (transform: Metadata, Warnings; upload: Processed, then Success).
func NewResponse(req contracts.Request) contracts.Response {
	// Recipe is echoed only when the request named one: a seed client's answer stays the seed's. And
	// only a valid name: response.schema.json allows nothing else there (contracts.ParseRequest
	// already clears an invalid one from a refused request; this holds for every other path too).
	r := contracts.Response{MediaID: req.MediaID, OriginalURL: req.MediaURL, Recipe: req.Recipe}
	if r.Recipe != "" && contracts.ValidateName(r.Recipe) != nil {
		r.Recipe = ""
	}
	return WithSource(r, req)
}

// WithSource echoes an ingest-made request's source as metadata.source (and nothing for any other
// request). A job sets the answer's metadata as it goes, replacing it whole, so the pipeline applies
// this again to what it returns.
func WithSource(r contracts.Response, req contracts.Request) contracts.Response {
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

// FailureResponse is the API's answer to a request that did not succeed.
func FailureResponse(req contracts.Request, msg string) contracts.Response {
	r := NewResponse(req)
	r.Success, r.Error = false, msg
	return r
}
