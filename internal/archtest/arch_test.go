// Package archtest holds the dependency rules of docs/architecture.md as a test, so an import that
// runs the wrong way fails CI instead of waiting for a reviewer.
package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/mediaworker/mediaworker/"

func TestDependencyArrows(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	// For each package (prefix), the packages of ours it must not import.
	rules := map[string][]string{
		"contracts":  {""}, // nothing of ours at all
		"scanner":    {"contracts", "jetstream", "pipeline", "objstore", "transcoder", "app"},
		"transcoder": {"contracts", "jetstream", "pipeline", "objstore", "scanner", "app"},
		"objstore":   {"contracts", "jetstream", "pipeline", "scanner", "transcoder", "app"},
		"pipeline":   {"jetstream", "app"},
		"jetstream":  {"app", "scanner", "transcoder"},
		"slots":      {""},
		"tracing":    {""},
		"progress":   {""},
		"console":    {""}, // a view: its data comes through its Source interface
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		for owner, banned := range rules {
			if pkg != owner && !strings.HasPrefix(pkg, owner+"/") {
				continue
			}
			checked++
			for _, imp := range fields[1:] {
				if !strings.HasPrefix(imp, mod) || strings.HasPrefix(imp, mod+owner) {
					continue
				}
				ours := strings.TrimPrefix(imp, mod)
				for _, b := range banned {
					if b == "" || ours == b || strings.HasPrefix(ours, b+"/") {
						t.Errorf("%s imports %s: against the arrows of docs/architecture.md", pkg, ours)
					}
				}
			}
		}
	}
	if checked < len(rules) {
		t.Fatalf("only %d packages matched the rules; did a package move?", checked)
	}
}
