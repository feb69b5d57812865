package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"

	natsjs "github.com/mediaworker/mediaworker/jetstream"
)

// The operator and API docs promise to list every setting, every metric and every dead-letter header.
// These tests keep the promise when the code grows: a new flag, metric or header fails here until the
// docs name it.

func TestOperationsDocListsEverySetting(t *testing.T) {
	doc := readDoc(t, "../docs/operations.md")
	for name := range runSettings(t) {
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("docs/operations.md does not list %s (regenerate the settings table as it describes)", name)
		}
	}
}

var metricName = regexp.MustCompile(`Name:\s+"(mediaworker_[a-z_]+)"`)

func TestOperationsDocListsEveryMetric(t *testing.T) {
	src, err := os.ReadFile("../app/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	names := metricName.FindAllStringSubmatch(string(src), -1)
	if len(names) == 0 {
		t.Fatal("found no metric names in app/metrics.go; has the way they are declared changed?")
	}
	doc := readDoc(t, "../docs/operations.md")
	for _, m := range names {
		if !strings.Contains(doc, "`"+m[1]+"`") {
			t.Errorf("docs/operations.md does not describe the metric %s", m[1])
		}
	}
}

func TestContractDocListsDeadLetterHeaders(t *testing.T) {
	doc := readDoc(t, "../docs/contract.md")
	for _, h := range []string{natsjs.HeaderReason, natsjs.HeaderLastError, natsjs.HeaderDeliveries, natsjs.HeaderStream,
		natsjs.HeaderStreamSeq, natsjs.HeaderPublishedAt, natsjs.HeaderDeadAt, natsjs.HeaderMsgID, natsjs.HeaderConsumer} {
		if !strings.Contains(doc, "`"+h+"`") {
			t.Errorf("docs/contract.md does not describe the dead-letter header %s", h)
		}
	}
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
