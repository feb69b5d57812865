package scanner_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/scanner"
)

func TestParseReply(t *testing.T) {
	tests := []struct {
		line string
		want scanner.Verdict
		kind scanner.Kind // 0: no error
	}{
		{line: "stream: OK", want: scanner.Verdict{}},
		{line: "stream: MediaWorker.Test.EICAR.UNOFFICIAL FOUND", want: scanner.Verdict{Infected: true, Signature: "MediaWorker.Test.EICAR.UNOFFICIAL"}},
		{line: "stream: Win.Test.EICAR_HDB-1 FOUND", want: scanner.Verdict{Infected: true, Signature: "Win.Test.EICAR_HDB-1"}},
		// ExtendedDetectionInfo appends (hash:size); the name is what matters.
		{line: "stream: Win.Test.EICAR_HDB-1(44d88612fea8a8f36de82e1278abb02f:68) FOUND", want: scanner.Verdict{Infected: true, Signature: "Win.Test.EICAR_HDB-1"}},
		// A name with parentheses that are not detection info is kept as it is.
		{line: "stream: Odd.Name(v2) FOUND", want: scanner.Verdict{Infected: true, Signature: "Odd.Name(v2)"}},

		// Over the limits: a refusal, never a virus and never clean.
		{line: "INSTREAM size limit exceeded. ERROR", kind: scanner.LimitExceeded},
		{line: "stream: Heuristics.Limits.Exceeded.MaxFileSize FOUND", kind: scanner.LimitExceeded},
		{line: "stream: Heuristics.Limits.Exceeded.MaxScanSize FOUND", kind: scanner.LimitExceeded},
		{line: "stream: Heuristics.Limits.Exceeded.MaxRecursion FOUND", kind: scanner.LimitExceeded},
		{line: "stream: Heuristics.Limits.Exceeded.MaxScanTime FOUND", kind: scanner.LimitExceeded},
		{line: "stream: Heuristics.Limits.Exceeded FOUND", kind: scanner.LimitExceeded},
		{line: "stream: Heuristics.Limits.Exceeded.MaxFileSize(44d88612fea8a8f36de82e1278abb02f:68) FOUND", kind: scanner.LimitExceeded},
		// Other heuristics are detections.
		{line: "stream: Heuristics.Encrypted.Zip FOUND", want: scanner.Verdict{Infected: true, Signature: "Heuristics.Encrypted.Zip"}},
		{line: "stream: Heuristics.Limits.ExceededNot FOUND", want: scanner.Verdict{Infected: true, Signature: "Heuristics.Limits.ExceededNot"}},

		// Everything else is a protocol error, never clean.
		{line: "", kind: scanner.Protocol},
		{line: "stream: ", kind: scanner.Protocol},
		{line: "stream: OK ", kind: scanner.Protocol},
		{line: " stream: OK", kind: scanner.Protocol},
		{line: "stream: ok", kind: scanner.Protocol},
		{line: "stream: OK\n", kind: scanner.Protocol},
		{line: "stream: OK\x00", kind: scanner.Protocol},
		{line: "stream:OK", kind: scanner.Protocol},
		{line: "OK", kind: scanner.Protocol},
		{line: "PONG", kind: scanner.Protocol},
		{line: "stream: FOUND", kind: scanner.Protocol},
		{line: "stream:  FOUND", kind: scanner.Protocol},
		{line: "stream:  Name FOUND", kind: scanner.Protocol},
		{line: "stream: Can't allocate memory ERROR", kind: scanner.Protocol},
		{line: "stream: lstat() failed: No such file or directory. ERROR", kind: scanner.Protocol},
		{line: "INSTREAM size limit exceeded.", kind: scanner.Protocol},
		{line: "UNKNOWN COMMAND", kind: scanner.Protocol},
		{line: "COMMAND READ TIMED OUT", kind: scanner.Protocol},
		{line: "stream: Eicar\x01 FOUND", kind: scanner.Protocol},
		{line: "stream: \xff FOUND", kind: scanner.Protocol},
		{line: "/tmp/file: OK", kind: scanner.Protocol},
		{line: "1: stream: OK", kind: scanner.Protocol},
	}
	for _, tt := range tests {
		got, err := scanner.ParseReply(tt.line)
		if tt.kind == 0 {
			if err != nil || got != tt.want {
				t.Errorf("ParseReply(%q) = %+v, %v; want %+v, nil", tt.line, got, err, tt.want)
			}
			continue
		}
		var se *scanner.Error
		if !errors.As(err, &se) || se.Kind != tt.kind {
			t.Errorf("ParseReply(%q) = %+v, %v; want a %v error", tt.line, got, err, tt.kind)
			continue
		}
		if got != (scanner.Verdict{}) {
			t.Errorf("ParseReply(%q) returned verdict %+v with its error", tt.line, got)
		}
		if scanner.IsRefused(err) != (tt.kind == scanner.LimitExceeded) {
			t.Errorf("IsRefused(ParseReply(%q)) = %v", tt.line, scanner.IsRefused(err))
		}
	}
}

func TestErrorMessages(t *testing.T) {
	_, err := scanner.ParseReply("stream: Heuristics.Limits.Exceeded.MaxFileSize FOUND")
	if msg := err.Error(); !strings.Contains(msg, "Heuristics.Limits.Exceeded.MaxFileSize") || !strings.Contains(msg, "over the scan limits") {
		t.Errorf("limit error %q should name the limit and say it is a limit", msg)
	}
	_, err = scanner.ParseReply(strings.Repeat("x", 10000))
	if len(err.Error()) > 400 {
		t.Errorf("error for a huge reply is %d bytes; replies must be quoted shortened", len(err.Error()))
	}
	wrapped := &scanner.Error{Kind: scanner.Unavailable, Op: "scanning stream", Err: errors.New("connection refused")}
	if got, want := wrapped.Error(), "scanning stream: clamd unavailable: connection refused"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !scanner.IsUnavailable(wrapped) || scanner.IsRefused(wrapped) || scanner.IsUnavailable(errors.New("x")) {
		t.Error("IsUnavailable/IsRefused misclassify")
	}
}

// FuzzParseReply holds the parser's promises for any input: it never panics, it is clean only for the
// exact "stream: OK", an infection always has a name taken from a "stream: <name> FOUND" line, a limits
// heuristic is never a virus, and an error never comes with a verdict.
func FuzzParseReply(f *testing.F) {
	for _, seed := range []string{
		"stream: OK",
		"stream: MediaWorker.Test.EICAR.UNOFFICIAL FOUND",
		"stream: Win.Test.EICAR_HDB-1(44d88612fea8a8f36de82e1278abb02f:68) FOUND",
		"stream: Heuristics.Limits.Exceeded.MaxFileSize FOUND",
		"INSTREAM size limit exceeded. ERROR",
		"stream: Can't allocate memory ERROR",
		"stream: OK\x00",
		"stream:  FOUND",
		"stream: (00000000000000000000000000000000:1) FOUND",
		"UNKNOWN COMMAND",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		v, err := scanner.ParseReply(line)
		if err != nil {
			var se *scanner.Error
			if !errors.As(err, &se) {
				t.Fatalf("ParseReply(%q) error %v is not a *scanner.Error", line, err)
			}
			if v != (scanner.Verdict{}) {
				t.Fatalf("ParseReply(%q) returned verdict %+v with error %v", line, v, err)
			}
			if se.Kind != scanner.Protocol && se.Kind != scanner.LimitExceeded {
				t.Fatalf("ParseReply(%q) kind %v", line, se.Kind)
			}
			return
		}
		if !v.Infected {
			if line != "stream: OK" || v.Signature != "" {
				t.Fatalf("ParseReply(%q) = clean %+v; only \"stream: OK\" is clean", line, v)
			}
			return
		}
		if v.Signature == "" || !strings.HasPrefix(line, "stream: "+v.Signature) || !strings.HasSuffix(line, " FOUND") {
			t.Fatalf("ParseReply(%q) = %+v: name not taken from a FOUND line", line, v)
		}
		if strings.HasPrefix(v.Signature, "Heuristics.Limits.Exceeded.") || v.Signature == "Heuristics.Limits.Exceeded" {
			t.Fatalf("ParseReply(%q) reported a limits heuristic as a virus", line)
		}
	})
}
