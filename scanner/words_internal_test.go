package scanner

import (
	"errors"
	"strings"
	"testing"
)

// A refusal carries its public words from where it is made (issue 32 item 4): the pipeline shows
// Public, never the error's text, so what clamd could not scan must be in Words.
func TestRefusalsCarryTheirWords(t *testing.T) {
	_, err := parseReply("stream: Heuristics.Limits.Exceeded.MaxFileSize FOUND", "scanning stream")
	if err == nil || err.Kind != LimitExceeded {
		t.Fatalf("parseReply: %v, want a refusal", err)
	}
	if got, want := err.Public(), "scanning stream: over the scan limits: clamd could not scan the whole input: Heuristics.Limits.Exceeded.MaxFileSize"; got != want {
		t.Errorf("Public() = %q, want %q", got, want)
	}
	_, err = parseReply(sizeLimitReply, "scanning stream")
	if err == nil || !strings.Contains(err.Public(), "stream limit") {
		t.Errorf("size-limit refusal: %v, Public %q", err, err.Public())
	}
	// What a cause says never reaches Public: an address, a socket path.
	e := &Error{Kind: Unavailable, Op: "dialing", Err: errors.New("dial unix /run/clamav/clamd.ctl: connect: no such file")}
	if got := e.Public(); got != "dialing: clamd unavailable" {
		t.Errorf("Public() = %q", got)
	}
}
