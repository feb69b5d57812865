package deploy

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// shBlocks returns the ```sh blocks of doc with the heading each sits under.
func shBlocks(doc string) (blocks, headings []string) {
	heading := ""
	in := false
	var cur []string
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case !in && strings.HasPrefix(l, "#"):
			heading = l
		case !in && l == "```sh":
			in, cur = true, nil
		case in && l == "```":
			in = false
			blocks, headings = append(blocks, strings.Join(cur, "\n")), append(headings, heading)
		case in:
			cur = append(cur, l)
		}
	}
	return blocks, headings
}

var firstWord = regexp.MustCompile(`^\s*([^\s#]+)`)

// A newcomer pastes the README's commands into a fresh clone's shell: `mediaworker` is not on the PATH
// there (run.sh builds bin/mediaworker), the nats CLI needs an install line, a recipe needs a worker
// restarted with its file, and what run.sh promises (config, stop-clamd) it does.
func TestREADMECommandsWorkFromAFreshClone(t *testing.T) {
	doc := readDoc(t, "../README.md")
	blocks, headings := shBlocks(doc)
	if len(blocks) < 4 {
		t.Fatalf("found %d sh blocks in README.md; has its layout changed?", len(blocks))
	}
	for i, b := range blocks {
		continued := false
		for _, l := range strings.Split(b, "\n") {
			if m := firstWord.FindStringSubmatch(l); m != nil && !continued && m[1] == "mediaworker" {
				t.Errorf("README %s runs %q: a fresh clone has no mediaworker on its PATH; write bin/mediaworker (what run.sh builds)", headings[i], strings.TrimSpace(l))
			}
			continued = strings.HasSuffix(strings.TrimSpace(l), "\\")
		}
	}
	if want := "go install github.com/nats-io/natscli/nats@" + testenv.NATSCLIVersion; !strings.Contains(doc, want) {
		t.Errorf("README does not say how to install the nats CLI its steps drive (%s)", want)
	}
	// The recipe section: the worker is started again with the file before a request names its recipe.
	sec := doc[strings.Index(doc, "### A config file and recipes"):]
	restart, submit := strings.Index(sec, "./scripts/run.sh --config site.yaml"), strings.Index(sec, "submit --wait --recipe avatar")
	if restart < 0 || submit < 0 || restart > submit {
		t.Errorf("README's recipe section submits --recipe avatar without first restarting the worker with site.yaml (./scripts/run.sh --config site.yaml)")
	}
	if !strings.Contains(doc, "<dir>/images/<mediaId>/<recipe>/<stem>_<name>.<ext>") {
		t.Errorf("README's key layout omits a named recipe's <recipe>/ level")
	}
	for _, cmd := range []string{"./scripts/run.sh config", "./scripts/run.sh stop-clamd"} {
		if !strings.Contains(doc, cmd) {
			t.Errorf("README does not show %s", cmd)
		}
	}

	// `run.sh config` shows the data dir and clamd address run.sh's worker uses, not the defaults.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../scripts/run.sh", "config")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/run.sh config: %v\n%s", err, out)
	}
	root, _ := filepath.Abs("..")
	if !regexp.MustCompile(`(?m)^embedded\.data_dir\s+--data-dir\s+` + regexp.QuoteMeta(filepath.Join(root, "data")) + `\s+flag$`).Match(out) {
		t.Errorf("scripts/run.sh config does not show run.sh's data dir %s/data:\n%s", root, out)
	}
}
