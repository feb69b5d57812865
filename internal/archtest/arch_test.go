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
		"pipeline":   {"jetstream", "app", "slots"}, // a pull is a slot: pools live in the pull loop
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

// importers lists, for each package of ours, what it imports (non-test code).
func importers(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkgs[strings.TrimPrefix(fields[0], mod)] = fields[1:]
	}
	return pkgs
}

// NATS belongs to jetstream: the rest of the worker reaches NATS through it. The object-store backend
// on JetStream and the trace-context carrier are NATS by nature; the clients (benchmarks, the example
// API, the test harness) talk to NATS as an API would. app and cmd/mediaworker still hold the connect
// code (issue 12 item 4 moves it into jetstream); nobody else may start.
func TestOnlyTheseImportNATS(t *testing.T) {
	allowed := map[string]bool{
		"jetstream": true, "objstore/natsobj": true, "tracing": true,
		"app": true, "cmd/mediaworker": true, // connect code, until it moves into jetstream
		"bench": true, "examples/apiconsumer": true, "internal/testenv": true,
	}
	for pkg, imports := range importers(t) {
		for _, imp := range imports {
			if (imp == "github.com/nats-io/nats.go" || strings.HasPrefix(imp, "github.com/nats-io/nats.go/")) && !allowed[pkg] {
				t.Errorf("%s imports %s: NATS belongs to package jetstream (docs/architecture.md)", pkg, imp)
			}
		}
	}
}

// app is the wiring of one worker process: only main imports it.
func TestOnlyMainImportsApp(t *testing.T) {
	for pkg, imports := range importers(t) {
		for _, imp := range imports {
			if imp == mod+"app" && pkg != "cmd/mediaworker" {
				t.Errorf("%s imports app: only cmd/mediaworker wires the app (docs/architecture.md)", pkg)
			}
		}
	}
}
