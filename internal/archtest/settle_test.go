package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// settling matches the calls that settle a message or publish one: acks, naks, terms, InProgress and
// every kind of publish (JetStream, core NATS, asynchronous).
var settling = regexp.MustCompile(`\.(Ack|DoubleAck|Nak|NakWithDelay|Term|TermWithReason|InProgress|Publish|PublishMsg|PublishAsync|PublishMsgAsync|Respond|RespondMsg)\(`)

// Issue 22 item 4: settlement is one plan applied in one place. In jetstream, only apply.go acks,
// naks, terms, sends InProgress or publishes; client.go publishes requests (the API's side, and the
// operator's replay of a dead letter through it). A settlement anywhere else is a plan handed to apply.
func TestOnlyApplySettles(t *testing.T) {
	allowed := map[string]bool{"jetstream/apply.go": true, "jetstream/client.go": true}
	seen := 0
	for _, rel := range sourceFiles(t) {
		if !strings.HasPrefix(rel, "jetstream/") || strings.Contains(strings.TrimPrefix(rel, "jetstream/"), "/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root(t), rel))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "//")
			if !settling.MatchString(code) {
				continue
			}
			seen++
			if !allowed[rel] {
				t.Errorf("%s:%d settles or publishes outside apply.go: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
	}
	if seen == 0 {
		t.Fatal("no settling call found at all: has jetstream/apply.go moved?")
	}
}
