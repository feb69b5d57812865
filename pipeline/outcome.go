// Package pipeline runs one media job: download → scan → detect → transform → upload. It composes the
// leaf capabilities (object store, scanner, transcoders) through interfaces declared here and returns an
// Outcome. It never acknowledges or publishes anything: the jetstream package maps outcomes to acks and
// events.
package pipeline

import (
	"errors"
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
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Outcome is the result of one job.
type Outcome struct {
	Kind      Kind
	MediaKind MediaKind // image or video once detected, "" before
	Response  contracts.Response
	Virus     *contracts.VirusEvent
	Err       error // the cause, for Failed, Infected and Retry
}

// Class says whether an error is worth retrying.
type Class int

const (
	// Transient errors may go away on another delivery.
	Transient Class = iota
	// Permanent errors will not: the input or the request is at fault.
	Permanent
)

// Error is the one typed error of the pipeline: a stage, a class and the cause. Error() is the message a
// person reads in the failure response.
type Error struct {
	Class Class
	Stage string // downloading, scanning, detecting, transforming, uploading, ...
	Err   error
}

func (e *Error) Error() string { return e.Stage + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func permanent(stage string, err error) *Error {
	return &Error{Class: Permanent, Stage: stage, Err: err}
}
func transient(stage string, err error) *Error {
	return &Error{Class: Transient, Stage: stage, Err: err}
}

// ClassOf returns the class of err: Permanent only when some *Error in its chain says so.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return Transient
}
