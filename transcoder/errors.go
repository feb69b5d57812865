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
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	return e.Msg + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// IsBadInput reports whether err is (or wraps) an Error caused by the input.
func IsBadInput(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.BadInput
}

func badInput(msg string, err error) *Error { return &Error{BadInput: true, Msg: msg, Err: err} }

func internal(msg string, err error) *Error { return &Error{Msg: msg, Err: err} }
