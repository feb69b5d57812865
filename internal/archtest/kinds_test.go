package archtest

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Issue 32: kinds are a registry (job/registry.go). A kind declares once, in its own files (job's
// kind_<name>.go, pipeline's kind_<name>.go, its transformer's <name>*.go), how it is recognised,
// its lane and how it is transformed; everything else lists the registry. An image/video switch
// anywhere else is a place a new kind would have to be added by hand: this is the grep.
var kindSwitch = regexp.MustCompile(`pipeline\.(Image|Video)|(Image|Video)Lane|Max(Image|Video)Jobs|case (Image|Video)`)

// kindsOwnFile says whether rel is one of a kind's own files: its entry or its transformer.
func kindsOwnFile(rel string) bool {
	base := path.Base(rel)
	for _, k := range []string{"image", "video", "document"} {
		if strings.HasPrefix(base, k) || strings.HasPrefix(base, "kind_"+k) || strings.Contains(base, "_"+k) {
			return true
		}
	}
	return false
}

func TestNoKindSwitchOutsideKinds(t *testing.T) {
	files := sourceFiles(t)
	if len(files) < 100 {
		t.Fatalf("only %d source files found: did the walk miss the module?", len(files))
	}
	for _, rel := range files {
		if kindsOwnFile(rel) {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root(t), rel))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if kindSwitch.MatchString(line) {
				t.Errorf("%s:%d: %s\n\ta kind's own case outside its files: list job.Specs() or move it into the kind's entry", rel, i+1, strings.TrimSpace(line))
			}
		}
	}
}
