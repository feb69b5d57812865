package scanner

import "errors"

// Kind says why a scan produced no verdict, and so whether trying again can help.
type Kind int

const (
	// Unavailable: clamd could not be reached or the connection failed (dial, I/O, timeout, closed
	// without a reply). Transient.
	Unavailable Kind = iota + 1
	// Protocol: clamd sent something other than a well-formed verdict (including clamd's own
	// "... ERROR" replies such as a full temp disk). Transient.
	Protocol
	// LimitExceeded: the input cannot be scanned in full under the limits — it is larger than
	// Config.MaxStreamBytes, clamd replied "INSTREAM size limit exceeded", or clamd flagged it
	// Heuristics.Limits.Exceeded.*. Permanent: the same input will be refused again.
	LimitExceeded
	// Truncated: the input did not yield exactly the announced number of bytes (short, long, or a read
	// error), so whatever clamd saw is not the input. Transient (e.g. a broken download).
	Truncated
	// Canceled: the caller's context ended (canceled or past its deadline) before a verdict. Transient;
	// errors.Is(err, context.Canceled / context.DeadlineExceeded) also holds.
	Canceled
	// Misconfigured: CheckLimits found that clamd cannot scan every input up to the worker's cap in
	// full, or would report what it cannot scan as clean. The worker must not start with it.
	Misconfigured
)

// String names the kind for messages and logs.
func (k Kind) String() string {
	switch k {
	case Unavailable:
		return "clamd unavailable"
	case Protocol:
		return "unexpected clamd reply"
	case LimitExceeded:
		return "over the scan limits"
	case Truncated:
		return "input not read in full"
	case Canceled:
		return "scan canceled"
	case Misconfigured:
		return "clamd is misconfigured"
	default:
		return "unknown scanner error"
	}
}

// Error is the error every Scanner method returns when it has no verdict. Never treat it as clean.
type Error struct {
	Kind Kind
	Op   string // what was being done, e.g. "scanning stream"
	Err  error  // the cause; may be nil
	// Words is the cause in words for the person who sent the upload, set where the error is made (a
	// refusal: what clamd could not scan, and why); "" when there are none. Public reads it, never Err.
	Words string
}

// Error reads as "<op>: <kind>: <cause>", e.g.
// "scanning stream: clamd unavailable: dial tcp 127.0.0.1:3310: connect: connection refused".
func (e *Error) Error() string {
	msg := e.Kind.String()
	if e.Op != "" {
		msg = e.Op + ": " + msg
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Public is what a person who sent the upload may read of e: "<op>: <kind>[: <words>]", with the
// words set where e was made and nothing of its cause's text (an address, a socket path, clamd's
// reply).
func (e *Error) Public() string {
	msg := e.Kind.String()
	if e.Op != "" {
		msg = e.Op + ": " + msg
	}
	if e.Words != "" {
		msg += ": " + e.Words
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// IsRefused reports whether err means the input cannot be scanned under the limits. That is permanent:
// the job must fail (never be reported clean), and retrying cannot help.
func IsRefused(err error) bool { return kindOf(err) == LimitExceeded }

// IsMisconfigured reports whether err is CheckLimits' verdict that clamd's configuration does not fit
// the worker's input cap.
func IsMisconfigured(err error) bool { return kindOf(err) == Misconfigured }

// IsUnavailable reports whether err means clamd could not be reached or the connection to it failed.
func IsUnavailable(err error) bool { return kindOf(err) == Unavailable }

// kindOf returns the Kind of the first *Error in err's chain, or 0.
func kindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}
