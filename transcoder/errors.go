package transcoder

import "errors"

// Error is a failed transform. BadInput says whether the input itself is the cause (unknown,
// unsupported, corrupt or truncated media, or media over a limit): retrying cannot help and the
// message is meant for the person who uploaded it. Otherwise the failure is internal (a tool that
// could not run, a full disk, ...) and may go away on a retry.
type Error struct {
	BadInput bool
	Msg      string // what happened, e.g. "image is 100000×100000 (10000 MP), limit is 50 MP"
	Err      error  // the underlying cause, if any
	// Detail is what a library said about the input, for the operator's log; it is not part of
	// Error(), which a person who uploaded the file reads and which must not carry library internals.
	Detail string
	// Words, for an internal failure, is what failed on the worker's side in words for people (the
	// scratch disk is full), set where the error is made: a tool's failure of the machine shows only
	// in its stderr, which the transcoder reads and nobody after it may (no public text is derived
	// from a tool's words). "" when the site could not tell.
	Words string
	// cause is the failure Detail describes, kept for Unwrap (errors.As finds the tool's error)
	// without putting its words in Error().
	cause error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	return e.Msg + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return e.cause
}

// IsBadInput reports whether err is (or wraps) an Error caused by the input.
func IsBadInput(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.BadInput
}

// ErrorDetail returns what a tool or library said about a failed transform in err's chain (ffmpeg's
// stderr, libvips' message), for the operator's log; "" when there is none. The response carries
// only the message for people.
func ErrorDetail(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Detail
	}
	return ""
}

func badInput(msg string, err error) *Error { return &Error{BadInput: true, Msg: msg, Err: err} }

// badInputSaid is bad input that a tool or library described in its own words (ffmpeg's stderr, say):
// the person who uploaded the file reads msg alone, the operator's log gets the words as Detail.
func badInputSaid(msg string, cause error) *Error {
	return &Error{BadInput: true, Msg: msg, Detail: cause.Error(), cause: cause}
}

func internal(msg string, err error) *Error { return &Error{Msg: msg, Err: err} }
