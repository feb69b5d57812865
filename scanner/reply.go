package scanner

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The replies clamd sends to INSTREAM (clamd 0.9x–1.4; see docs/man clamd(8)), and to FILDES, the same
// with "fd[N]: " in place of "stream: ". Everything else is a protocol error: a reply we do not
// understand is never a clean verdict.
const (
	streamPrefix    = "stream: "
	cleanStatus     = "OK"
	foundSuffix     = " FOUND"
	errorSuffix     = " ERROR"
	sizeLimitReply  = "INSTREAM size limit exceeded. ERROR" // no "stream: " prefix
	limitsHeuristic = "Heuristics.Limits.Exceeded"          // AlertExceedsMax: ".MaxFileSize", ".MaxScanSize", ...
	maxQuotedReply  = 200                                   // bytes of a bad reply quoted in an error
)

// Verdict is clamd's answer for one input. The zero Verdict is clean, so a Verdict is meaningful only
// when the error returned with it is nil.
type Verdict struct {
	Infected  bool
	Signature string // the detection name, e.g. "Win.Test.EICAR_HDB-1" or "MediaWorker.Test.EICAR.UNOFFICIAL"
}

// ParseReply parses one clamd INSTREAM reply line (without its NUL or newline terminator) strictly:
//
//	"stream: OK"                                 → clean
//	"stream: <Name> FOUND"                       → infected with Name
//	"stream: Heuristics.Limits.Exceeded.* FOUND" → LimitExceeded error (a refusal, NOT a virus)
//	"INSTREAM size limit exceeded. ERROR"        → LimitExceeded error
//	anything else                                → Protocol error
//
// With clamd's ExtendedDetectionInfo the name carries "(<hash>:<size>)"; that suffix is removed.
func ParseReply(line string) (Verdict, error) {
	v, err := parseReply(line, "parsing clamd reply")
	if err != nil {
		return Verdict{}, err
	}
	return v, nil
}

// parseReply is ParseReply with the *Error typed and its Op chosen by the caller.
func parseReply(line, op string) (Verdict, *Error) {
	return parseVerdict(line, op, cutStreamPrefix)
}

// cutStreamPrefix removes INSTREAM's "stream: ".
func cutStreamPrefix(line string) (string, bool) { return strings.CutPrefix(line, streamPrefix) }

// cutDescriptorPrefix removes FILDES's "fd[N]: ", N being the descriptor's number in clamd.
func cutDescriptorPrefix(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "fd[")
	if !ok {
		return "", false
	}
	num, rest, ok := strings.Cut(rest, "]: ")
	if !ok || !isDigits(num) {
		return "", false
	}
	return rest, true
}

// parseVerdict parses a reply whose "<name>: " prefix cut removes (and says was there).
func parseVerdict(line, op string, cut func(string) (string, bool)) (Verdict, *Error) {
	if !utf8.ValidString(line) || strings.ContainsFunc(line, isControl) {
		return Verdict{}, &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("reply %s has control characters or invalid UTF-8", quote(line))}
	}
	if line == sizeLimitReply {
		return Verdict{}, &Error{Kind: LimitExceeded, Op: op,
			Err:   errors.New("clamd: INSTREAM size limit exceeded (the input is larger than clamd's StreamMaxLength)"),
			Words: "the input is larger than the virus scanner's stream limit (StreamMaxLength)"}
	}
	rest, ok := cut(line)
	if !ok {
		return Verdict{}, &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("reply %s is not a stream verdict", quote(line))}
	}
	switch {
	case rest == cleanStatus:
		return Verdict{}, nil
	case strings.HasSuffix(rest, foundSuffix):
		name := stripDetectionInfo(strings.TrimSuffix(rest, foundSuffix))
		if name == "" || strings.TrimSpace(name) != name {
			return Verdict{}, &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("reply %s has no usable detection name", quote(line))}
		}
		if name == limitsHeuristic || strings.HasPrefix(name, limitsHeuristic+".") {
			// AlertExceedsMax: clamd stopped before the end of the input. What it did not scan is
			// unknown, so this is a refusal; reporting it as a virus would delete a good upload.
			words := "clamd could not scan the whole input: " + name // name passed the checks above: no control characters
			return Verdict{}, &Error{Kind: LimitExceeded, Op: op, Err: errors.New(words), Words: words}
		}
		return Verdict{Infected: true, Signature: name}, nil
	case strings.HasSuffix(rest, errorSuffix):
		return Verdict{}, &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("clamd reported an error: %s", quote(strings.TrimSuffix(rest, errorSuffix)))}
	default:
		return Verdict{}, &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("reply %s is not a stream verdict", quote(line))}
	}
}

// stripDetectionInfo removes the "(<hex hash>:<size>)" that clamd appends to a detection name when
// ExtendedDetectionInfo is on, and leaves any other name alone.
func stripDetectionInfo(name string) string {
	open := strings.LastIndexByte(name, '(')
	if open <= 0 || !strings.HasSuffix(name, ")") {
		return name
	}
	hash, size, ok := strings.Cut(name[open+1:len(name)-1], ":")
	if !ok || !isHex(hash) || !isDigits(size) {
		return name
	}
	return name[:open]
}

func isHex(s string) bool {
	if len(s) != 32 && len(s) != 40 && len(s) != 64 { // md5, sha1, sha256
		return false
	}
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F') {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

// quote renders a reply for an error message, shortened: replies come from the network.
func quote(s string) string {
	if len(s) > maxQuotedReply {
		return fmt.Sprintf("%q...", s[:maxQuotedReply])
	}
	return fmt.Sprintf("%q", s)
}
