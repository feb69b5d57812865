// Package archtest holds the dependency rules of docs/architecture.md as a test, so an import that
// runs the wrong way fails CI instead of waiting for a reviewer.
package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
		"pipeline":   {"jetstream", "app", "slots"},                            // a pull is a slot: pools live in the pull loop
		"jetstream":  {"app", "pipeline", "scanner", "transcoder", "objstore"}, // issue 32: outcomes in job's words; never opens an upload
		"slots":      {""},
		"membudget":  {""}, // a leaf: the pipeline asks it for memory, the app wires it
		"tracing":    {""},
		"progress":   {""},
		"console":    {""}, // a view: its data comes through its Source interface
		// The store's upload events become ordinary requests: ingest knows the request, not how it is run.
		"ingest": {"pipeline", "jetstream", "app", "scanner", "transcoder", "slots", "membudget"},
		// Answers delivered over HTTP: webhooks reads the responses stream, knows the answer, not the job.
		"webhooks": {"pipeline", "jetstream", "app", "scanner", "transcoder", "objstore", "slots", "membudget", "ingest"},
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

// Issue 32: the job's vocabulary (package job), which jetstream and the pipeline both stand on, stands
// on contracts alone, so neither of them reaches the other through it.
func TestJobImportsOnlyContracts(t *testing.T) {
	imports, ok := importers(t)["job"]
	if !ok {
		t.Fatal("no package job: has the job's vocabulary moved?")
	}
	for _, imp := range imports {
		if strings.HasPrefix(imp, mod) && imp != mod+"contracts" {
			t.Errorf("job imports %s: the job's vocabulary imports only contracts of ours (docs/architecture.md)", strings.TrimPrefix(imp, mod))
		}
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
// on JetStream, the trace-context carrier, ingest (a consumer of the store's events, a publisher
// of plain requests) and webhooks (a consumer of the responses stream, per endpoint) are NATS by nature; app and cmd/mediaworker hold nats.go's
// handles (a connection, JetStream contexts, the console's stream reads) but open them only through
// jetstream.Connect (TestOnlyJetstreamConnects); the clients (benchmarks, the example API, the test
// harness) talk to NATS as an API would. Nobody else may start.
func TestOnlyTheseImportNATS(t *testing.T) {
	allowed := map[string]bool{
		"jetstream": true, "objstore/natsobj": true, "tracing": true, "ingest": true, "webhooks": true,
		"app": true, "cmd/mediaworker": true, // handles only; see TestOnlyJetstreamConnects
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

// One connect: the worker, its commands and the benchmarks' client open NATS through
// jetstream.Connect, so credentials, client names and connection errors are the same everywhere. Only
// the example API (written as an outside API would be) and the test harness call nats.Connect.
func TestOnlyJetstreamConnects(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.Dir}} {{.ImportPath}} {{join .GoFiles " "}}`, mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{"jetstream": true, "examples/apiconsumer": true, "internal/testenv": true}
	found := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		dir, pkg := fields[0], strings.TrimPrefix(fields[1], mod)
		for _, f := range fields[2:] {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(b), "nats.Connect("); n > 0 {
				found += n
				if !allowed[pkg] {
					t.Errorf("%s/%s calls nats.Connect: use jetstream.Connect (one connect for the worker and its clients)", pkg, f)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no nats.Connect found at all: has jetstream.Connect moved?")
	}
}

// The messages themselves belong to jetstream too: nobody else publishes, subscribes or consumes.
// `submit`, the benchmarks and the console hear the worker through jetstream.Client; the object-store
// backend on JetStream moves its chunks itself, ingest its events and the requests it makes of them, webhooks
// the answers it delivers (and dead-letters); the example API and the test harness are clients.
func TestOnlyJetstreamMovesMessages(t *testing.T) {
	calls := regexp.MustCompile(`\.(Publish|PublishMsg|PublishMsgAsync|PublishAsync|Subscribe|QueueSubscribe|ChanSubscribe|SubscribeSync|OrderedConsumer|Consume|Messages|Fetch|FetchNoWait|Request|RequestWithContext)\(`)
	allowed := []string{"jetstream/", "objstore/natsobj/", "ingest/", "webhooks/", "examples/", "internal/testenv/"}
	found := 0
	for _, rel := range sourceFiles(t) {
		b, err := os.ReadFile(filepath.Join(root(t), rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range calls.FindAllString(string(b), -1) {
			found++
			if !slices.ContainsFunc(allowed, func(p string) bool { return strings.HasPrefix(rel, p) }) {
				t.Errorf("%s calls %s: publishing and subscribing belong to package jetstream (jetstream.Client for clients)", rel, m)
			}
		}
	}
	if found == 0 {
		t.Fatal("no publish or subscribe found at all: has package jetstream moved?")
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

// libvips is the worker's only C: transcoder/vips is the one package that uses cgo, so a crash or a
// leak in C is looked for in one place, and poppler and librsvg (which libvips carries) are reached
// only by the confined render child, through the same package.
func TestOnlyVipsIsCgo(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{len .CgoFiles}}`, mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, n, _ := strings.Cut(line, " ")
		pkg = strings.TrimPrefix(pkg, mod)
		if n == "0" {
			continue
		}
		if pkg == "transcoder/vips" {
			found = true
			continue
		}
		t.Errorf("%s uses cgo (%s files): C belongs to transcoder/vips (docs/architecture.md)", pkg, n)
	}
	if !found {
		t.Fatal("transcoder/vips uses no cgo: has libvips' binding moved?")
	}
}
