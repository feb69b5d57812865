package testenv

import (
	"regexp"
	"strings"
)

// A Go program's SIGQUIT dump runs to thousands of lines, most of them the NATS client's and the
// runtime's idle goroutines; CI shows a test's output truncated. GoroutinesOf keeps what a failure
// report needs: the log before the dump, and whole only the goroutines that run this module's code.

// frameNoise is the per-frame register suffix GOTRACEBACK=system and above print.
var frameNoise = regexp.MustCompile(` fp=0x[0-9a-f]+ sp=0x[0-9a-f]+ pc=0x[0-9a-f]+$`)

// GoroutinesOf splits a log that ends in a Go goroutine dump into the last logLines lines before the
// dump and the dump's goroutines whose stack mentions one of frames (a package path prefix), without
// the per-frame register noise. A log without a dump comes back as its tail and "".
func GoroutinesOf(log []byte, logLines int, frames ...string) (before, goroutines string) {
	s := string(log)
	at := strings.Index(s, "\ngoroutine ")
	if at < 0 {
		return TailLines(log, logLines), ""
	}
	// The dump starts with "SIGQUIT: quit" and the PC line; the log is what precedes them.
	head := s[:at]
	if i := strings.LastIndex(head, "SIGQUIT"); i >= 0 {
		head = head[:i]
	}
	var kept []string
	for _, g := range strings.Split(s[at+1:], "\n\n") {
		if !strings.HasPrefix(g, "goroutine ") || !mentionsAny(g, frames) {
			continue
		}
		lines := strings.Split(g, "\n")
		for i, l := range lines {
			lines[i] = frameNoise.ReplaceAllString(l, "")
		}
		kept = append(kept, strings.Join(lines, "\n"))
	}
	return TailLines([]byte(head), logLines), strings.Join(kept, "\n\n")
}

func mentionsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
