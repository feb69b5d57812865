package deploy

import (
	"os"
	"regexp"
	"testing"
)

// MW_MAX_ACK_PENDING has one rule, written in docs/operations.md and the flag's help (at least 2 × a
// lane's slots of all instances); the manifests' comments state that rule, not another.
func TestMaxAckPendingHasOneRule(t *testing.T) {
	other := regexp.MustCompile(`(?i)five times its slots|[^.0-9]5 × \(|× 5 ×|four per slot`)
	for _, f := range []string{"compose.yaml", "k8s/configmap.yaml", "k8s/README.md", "../README.md", "../docs/operations.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := other.Find(b); m != nil {
			t.Errorf("%s states another MW_MAX_ACK_PENDING rule (%q); the rule is 2 × a lane's slots of all instances", f, m)
		}
	}
	help := readDoc(t, "../docs/operations.md")
	if !regexp.MustCompile("at least 2 × the lane's slots of all instances").MatchString(help) {
		t.Error("docs/operations.md no longer states the rule this test holds the manifests to")
	}
}
