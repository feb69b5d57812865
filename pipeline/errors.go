package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/mediaworker/mediaworker/contracts"
	vocab "github.com/mediaworker/mediaworker/job" // the job's vocabulary; "job" here is one running job
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/transcoder"
)

// Errors have two sides. The public one is what the API hears (a response's error, also after "gave up
// after N deliveries: "): the stage and a sentence a person can act on, which never names an endpoint,
// a scratch path or a library's own words. The private one is the whole chain, for the operator: the
// log line and the dead letter's Mw-Last-Error (ErrorDetail).
//
// The public sentence is set where the error is made (imgproxy's shape), never read back from the
// error's text afterwards: a refusal the pipeline makes says its own words (refuse); a transformer's
// refusal of the input carries the transcoder's message for people (classed); a failure of the worker
// or a dependency gets, at its site, the sentence its types say (what failed: transient, causeSaid);
// and an Error without one reads as the fixed internalError sentence.

// Class says whether an error is worth retrying.
type Class int

const (
	// Transient errors may go away on another delivery.
	Transient Class = iota
	// Permanent errors will not: the input or the request is at fault.
	Permanent
)

// Error is the one typed error of the pipeline: a stage, a class, the cause and the public sentence.
// Error() is the whole chain, for the operator's log and the DLQ; Public() is what a person reads in
// the response.
type Error struct {
	Class Class
	Stage string // downloading, scanning, detecting, transforming, uploading, ...
	Err   error
	// Msg is the public sentence after the stage, set where the error is made and never derived from
	// Err's text; "" reads as internalError.
	Msg string
}

func (e *Error) Error() string { return e.Stage + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Public is the response's error for e: "<stage>: <sentence>".
func (e *Error) Public() string {
	if e.Msg == "" {
		return e.Stage + ": " + internalError
	}
	return e.Stage + ": " + e.Msg
}

// internalError is the public sentence of an error whose site gave none.
const internalError = "internal error"

// refuse is a permanent failure the pipeline describes itself: sentence is both its public words and,
// after the stage, its chain.
func refuse(stage, sentence string) *Error {
	return &Error{Class: Permanent, Stage: stage, Err: errors.New(sentence), Msg: sentence}
}

// refusedBy is a permanent failure whose public words are sentence and whose cause is err.
func refusedBy(stage, sentence string, err error) *Error {
	return &Error{Class: Permanent, Stage: stage, Err: err, Msg: sentence}
}

// transient is a failure of the worker or a dependency in stage, said in the words its types choose
// here, where it is made (causeSaid).
func transient(stage string, err error) *Error {
	return &Error{Class: Transient, Stage: stage, Err: err, Msg: causeSaid(stage, err)}
}

// transientSaid is a transient error whose public sentence is msg.
func transientSaid(stage, msg string, err error) *Error {
	return &Error{Class: Transient, Stage: stage, Err: err, Msg: msg}
}

// PublicMessage is what a response may say about err: an *Error's Public, a refused request's reason,
// or, for any other error (the caller's own, such as the max-deliveries advisory's), its text when it
// is a plain sentence and otherwise a sentence chosen from what failed.
func PublicMessage(err error) string {
	var (
		e  *Error
		pe *contracts.ParseError
		se *scanner.Error
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Public()
	case errors.As(err, &pe):
		return err.Error()
	case errors.As(err, &se) && se.Kind == scanner.LimitExceeded:
		// A refusal in the words the scanner set where it refused (the scan API's 422).
		return scanRefused(err).Msg
	}
	if s := err.Error(); plainSentence(s) {
		return s
	}
	return causeSaid("", err)
}

// ErrorDetail is the private side of err: its whole chain (endpoints, scratch paths, a library's words)
// and what a tool said about the input (ffmpeg's or libvips' own words), for the operator's log line
// and the dead letter's Mw-Last-Error. A response carries PublicMessage instead.
func ErrorDetail(err error) string {
	if err == nil {
		return ""
	}
	d := err.Error()
	if said := transcoder.ErrorDetail(err); said != "" && !strings.Contains(d, said) {
		d += " (the tool said: " + said + ")"
	}
	return d
}

// stageDependency names what a stage waits on, for the sentence of a failure that says no more.
var stageDependency = map[string]string{
	"downloading":                  "the object store",
	"uploading":                    "the object store",
	"removing infected object":     "the object store",
	"triaging":                     "the object store",
	"scanning":                     "the virus scanner",
	"recording the virus verdict":  "the NATS server",
	"recalling an earlier verdict": "the NATS server",
	"preparing scratch dir":        "the scratch disk",
	"checking scratch space":       "the scratch disk",
	"detecting":                    "the scratch disk",
	"probing":                      "a media tool",
	"transforming":                 "a media tool",
}

// causeSaid is the sentence for a transient failure of stage, chosen where the failure is made: what
// failed, in words a person who sent the upload can read, chosen from the error's types and errnos,
// never copied from its text.
func causeSaid(stage string, err error) string {
	dep := stageDependency[stage]
	if dep == "" {
		dep = "the worker"
	}
	var (
		se *scanner.Error
		te *transcoder.Error
	)
	switch {
	case errors.As(err, &se): // first: clamd's errors wrap network errors of their own
		return scannerSentence(se.Kind)
	case errors.As(err, &te):
		return toolSentence(te, err)
	case notStarted(err):
		return "a media tool could not be started"
	case unreachable(err):
		return dep + " could not be reached"
	}
	if s := diskSentence(err); s != "" {
		return s
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return dep + " did not answer in time"
	case errors.Is(err, context.Canceled):
		return "the job was stopped before it finished (the worker shut down or lost the delivery)"
	case errors.Is(err, objstore.ErrChanged):
		return "the upload changed while it was being processed"
	case errors.Is(err, objstore.ErrClosed):
		return "the worker was shutting down"
	}
	return dep + " failed"
}

func scannerSentence(k scanner.Kind) string {
	switch k {
	case scanner.Unavailable:
		return "the virus scanner could not be reached"
	case scanner.Truncated:
		return "the upload could not be read in full for the virus scan"
	case scanner.Canceled:
		return "the virus scan was stopped before a verdict"
	case scanner.Misconfigured:
		return "the virus scanner is misconfigured"
	}
	return "the virus scanner failed"
}

// toolSentence describes a transform or probe that failed for a reason other than its input: the
// transcoder's own name for the step, then what went wrong on the worker's side, in the words the
// transcoder set where it made the error (Words: ffmpeg reports the machine's failures only on its
// stderr, which the transcoder reads) or, failing those, the cause's types.
func toolSentence(te *transcoder.Error, err error) string {
	what := "a media tool failed"
	switch {
	case te.Words != "":
		what = te.Words
	case notStarted(err):
		what = "a media tool could not be started"
	case diskSentence(err) != "":
		what = diskSentence(err)
	}
	if te.Msg != "" && plainSentence(te.Msg) && !strings.Contains(te.Msg, ": ") {
		return te.Msg + ": " + what
	}
	return what
}

// notStarted reports a tool that could not be executed (missing, not executable).
func notStarted(err error) bool {
	var (
		ee *exec.Error
		pe *fs.PathError
	)
	return errors.As(err, &ee) || errors.As(err, &pe) && pe.Op == "fork/exec"
}

// unreachable reports a dependency that did not answer at the network level: no connection, a broken
// one, a name that did not resolve, an HTTP request that got no response.
func unreachable(err error) bool {
	var (
		oe *net.OpError
		de *net.DNSError
		ue *url.Error
	)
	if errors.As(err, &oe) || errors.As(err, &de) || errors.As(err, &ue) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EPIPE} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// diskSentence describes a failure of the scratch disk (every file the pipeline touches is on it), or
// returns "" when err is not one.
func diskSentence(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOSPC, syscall.EDQUOT:
			return "the scratch disk is full"
		case syscall.EROFS:
			return "the scratch disk is read-only"
		case syscall.EACCES, syscall.EPERM:
			return "the worker may not write to its scratch directory"
		case syscall.EIO:
			return "the scratch disk failed (a read or write error)"
		case syscall.ENOENT, syscall.ENOTDIR: // removed, or something else in its place
			return "the scratch directory is missing"
		case syscall.EMFILE, syscall.ENFILE:
			return "the worker has too many files open"
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return "the scratch disk failed"
	}
	return ""
}

// plainSentence reports whether s can be shown as it is: no path, no host:port, no quoted URL, no
// formatting accident, and at most one "stage: " prefix, not an error chain.
func plainSentence(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/\\\"\n") && !hostPort.MatchString(s) &&
		!strings.Contains(s, "%!") && strings.Count(s, ": ") <= 1
}

// hostPort matches the ":9000" of an address (and of a time such as 12:30, which no sentence needs).
var hostPort = regexp.MustCompile(`:\d`)

// jobStopped is the public sentence of a job whose context ended before it did (a shutdown, a lost
// delivery): the cause's own text ("context canceled") says nothing to a person.
const jobStopped = "the job was stopped before it finished (the worker shut down or lost the delivery)"

// withoutScratchPaths drops the job's scratch dir from a permanent failure's sentence. Those sentences
// are about the input and name no path today (the transcoder keeps paths and tools' words in its
// Detail); this keeps it so should one slip into a message: the response names a file by its fixed
// name ("input"), never where it lies on the worker. Only the job's own dir is replaced (a random
// name): --tmp-dir itself, "/tmp" say, may well be part of the request's key, which is echoed as is.
func withoutScratchPaths(j *job, msg string) string {
	if j.dir == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, j.dir+string(filepath.Separator), "")
	return strings.ReplaceAll(msg, j.dir, "the job's scratch dir")
}

// posterSentence is the public part of a poster's failure: the transcoder's message when it blames
// the input (its words for people), otherwise a sentence that names no tool output or path.
func posterSentence(err error) string {
	if transcoder.IsBadInput(err) {
		var te *transcoder.Error
		errors.As(err, &te)
		return te.Error()
	}
	return "no frame for it could be made"
}

// Words tells the pipeline's errors to whoever settles its outcomes (job.Words): PublicMessage for a
// response, ErrorDetail for the operator's log line and the dead letter's Mw-Last-Error.
var Words vocab.Words = words{}

type words struct{}

func (words) Public(err error) string { return PublicMessage(err) }
func (words) Detail(err error) string { return ErrorDetail(err) }

// The refusals the pipeline's fetching makes, each in its own words.

// emptyObject is the refusal of an upload of no bytes.
const emptyObject = "object is empty (0 bytes)"

// notFound refuses a request whose object is missing.
func notFound(req contracts.Request) *Error {
	return refuse("downloading", fmt.Sprintf("object %q not found in bucket %q", req.S3Key, req.S3Bucket))
}

// tooLargeInput refuses an upload over the input cap, saying both sizes.
func tooLargeInput(e *objstore.TooLargeError) *Error {
	return refusedBy("downloading",
		fmt.Sprintf("input is too large: object is %s, limit is %s", objstore.FormatBytes(e.Size), objstore.FormatBytes(e.Limit)),
		fmt.Errorf("input is too large: %w", e))
}

// storeRefused is a permanent refusal by the object store (objstore.IsPermanent), said by which one it
// is: the store's own text (a status line, the bucket and key as it spelled them) stays in the chain.
func storeRefused(stage string, err error) *Error {
	sentence := "refused by the object store"
	switch {
	case errors.Is(err, objstore.ErrInvalidName):
		sentence = "invalid bucket or key name"
	case errors.Is(err, objstore.ErrNotFound):
		sentence = "the object or its bucket was not found"
	}
	return refusedBy(stage, sentence, err)
}

// scanRefused is clamd's refusal to scan the upload in full (scanner.IsRefused), in the scanner's
// public words (scanner.Error.Public, set where it refused).
func scanRefused(err error) *Error {
	sentence := "the file cannot be scanned"
	var se *scanner.Error
	if errors.As(err, &se) {
		sentence += ": " + se.Public()
	}
	return refusedBy("scanning", sentence, fmt.Errorf("the file cannot be scanned: %w", err))
}
