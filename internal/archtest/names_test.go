package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// decls is what the module's non-test Go files declare: by package directory ("jetstream",
// "objstore/s3"), the names a reader may cite: functions, types, variables, constants, methods (both
// "Method" and "Type.Method"), struct fields and interface methods ("Type.Field").
type decls map[string]map[string]bool

// root is the module's directory (this package is internal/archtest).
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sourceFiles lists the module's non-test Go files, relative to root.
func sourceFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root(t), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root(t) && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			rel, _ := filepath.Rel(root(t), p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func declared(t *testing.T) decls {
	t.Helper()
	out := decls{}
	fset := token.NewFileSet()
	for _, rel := range sourceFiles(t) {
		f, err := parser.ParseFile(fset, filepath.Join(root(t), rel), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parsing %s: %v", rel, err)
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if out[dir] == nil {
			out[dir] = map[string]bool{}
		}
		names := out[dir]
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				names[d.Name.Name] = true
				if d.Recv != nil && len(d.Recv.List) == 1 {
					names[recvType(d.Recv.List[0].Type)+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
						addMembers(names, s.Name.Name, s.Type)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return out
}

func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

func addMembers(names map[string]bool, typ string, e ast.Expr) {
	var fields *ast.FieldList
	switch e := e.(type) {
	case *ast.StructType:
		fields = e.Fields
	case *ast.InterfaceType:
		fields = e.Methods
	default:
		return
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			names[typ+"."+n.Name] = true
			names[n.Name] = true
		}
	}
}

// has reports whether pkg (a directory, or its last element) declares name ("X" or "Type.X").
func (d decls) has(pkg, name string) bool {
	for dir, names := range d {
		if (dir == pkg || filepath.Base(dir) == pkg) && names[name] {
			return true
		}
	}
	return false
}

func (d decls) anywhere(name string) bool {
	for _, names := range d {
		if names[name] {
			return true
		}
	}
	return false
}

func (d decls) isPackage(name string) bool {
	for dir := range d {
		if dir == name || filepath.Base(dir) == name {
			return true
		}
	}
	return false
}

var (
	qualified  = regexp.MustCompile(`^([a-z][a-z0-9]*)((?:\.[A-Za-z_][A-Za-z0-9_]*)+)$`)
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// pkg.Name or pkg.Type.Method in the pictures (code blocks), where nothing is backticked.
	pictured = regexp.MustCompile(`\b(jetstream|pipeline|job|objstore|slots|app|scanner|transcoder|contracts)((?:\.[A-Za-z_][A-Za-z0-9_]*)+)`)
	goFile   = regexp.MustCompile(`\b[a-z0-9_/]+\.go\b`)
	// Type.member: an exported or unexported type's method or field, without its package.
	member     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$`)
	typeMember = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)\b`)
)

// notGo are the words docs/architecture.md puts in backticks that are not Go names of ours: commands,
// NATS terms, a convention.
var notGo = map[string]bool{
	"run": true, "submit": true, "streams": true, "dlq": true, "healthcheck": true, "config": true,
	"version": true, "main": true, "InProgress": true, "Close": true, "MAX_DELIVERIES": true,
	"APP_MEDIA_ADVISORIES": true,
}

// Issue 12: docs/architecture.md is drawn from the code as it is. Every package, file, function, type
// and field it names (in backticks, and pkg.Name in its pictures) must exist, so a rename that leaves
// the page behind fails here.
func TestArchitectureDocNamesExist(t *testing.T) {
	doc := architectureDoc(t)
	d := declared(t)
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(root(t), rel))
		return err == nil
	}
	tests := archtestTests(t)
	checked := 0
	check := func(tok string) {
		tok = strings.TrimSpace(tok)
		if strings.HasPrefix(tok, "POST ") || strings.HasPrefix(tok, "GET ") {
			return // an HTTP route
		}
		if i := strings.IndexAny(tok, "( "); i > 0 {
			tok = tok[:i] // scanner.IsRefused(err), BadInput bool
		}
		switch {
		case tok == "" || strings.HasPrefix(tok, "/") || strings.HasPrefix(tok, "-") || strings.HasPrefix(tok, "(") ||
			strings.Contains(tok, "*") || strings.HasSuffix(tok, ".md") || tok == "github.com/mediaworker/mediaworker" || notGo[tok]:
			return
		case strings.HasPrefix(tok, "fmt."):
			return // the standard library, in an example
		case strings.HasPrefix(tok, "Test"):
			checked++
			if !tests[tok] {
				t.Errorf("docs/architecture.md names %s, which internal/archtest does not declare", tok)
			}
		case strings.Contains(tok, "/") || strings.HasSuffix(tok, ".go"):
			checked++
			if !exists(tok) {
				t.Errorf("docs/architecture.md names %s, which does not exist", tok)
			}
		case qualified.MatchString(tok):
			m := qualified.FindStringSubmatch(tok)
			checked++
			if !d.isPackage(m[1]) {
				// An unexported type's member (rules.decide, settler.apply): declared as such somewhere.
				if !d.anywhere(tok) {
					t.Errorf("docs/architecture.md names %s: there is no package %s, nor a type %s declaring it", tok, m[1], m[1])
				}
				return
			}
			// jetstream.Worker.pull → Worker.pull; jetstream.WorkerConfig.Admission → WorkerConfig.Admission.
			if name := strings.TrimPrefix(m[2], "."); !d.has(m[1], name) && !d.anywhere(tok) {
				t.Errorf("docs/architecture.md names %s: package %s declares no %s", tok, m[1], name)
			}
		case member.MatchString(tok):
			checked++ // Worker.handle, Lane.overflowSubject
			if !d.anywhere(tok) {
				t.Errorf("docs/architecture.md names %s, which no type of the module declares", tok)
			}
		case identifier.MatchString(tok):
			checked++
			if !d.isPackage(tok) && !d.anywhere(tok) && !exists(tok) {
				t.Errorf("docs/architecture.md names %s, which nothing in the module declares", tok)
			}
		default:
			t.Errorf("docs/architecture.md: cannot check %q (teach this test the form, or drop the backticks)", tok)
		}
	}
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(doc, -1) {
		check(m[1])
	}
	for _, block := range codeBlocks(doc) {
		for _, m := range pictured.FindAllString(block, -1) {
			if !strings.HasSuffix(m, ".go") { // pipeline/pipeline.go: a file, checked whole below
				check(m)
			}
		}
		for _, f := range goFile.FindAllString(block, -1) {
			check(f)
		}
		// Type.member in the pictures (Worker.handle, rules.decide, fetcher.download): when the first
		// word is a type of ours, the member must be declared on it.
		for _, m := range typeMember.FindAllStringSubmatch(block, -1) {
			if m[2] == "go" || m[2] == "md" || d.isPackage(m[1]) || !d.anywhere(m[1]) {
				continue
			}
			checked++
			if !d.anywhere(m[0]) {
				t.Errorf("the pictures of docs/architecture.md name %s, which no type of the module declares", m[0])
			}
		}
	}
	if checked < 60 {
		t.Fatalf("only %d names checked: has the page lost its backticks?", checked)
	}
}

// Issue 12: a reader follows one request from pull to ack in package jetstream through a handful of
// functions. The picture of one request's way names each, in the order a message meets them; they
// must exist where the picture says.
func TestOneRequestsWayIsPictured(t *testing.T) {
	doc := architectureDoc(t)
	picture := sectionPicture(t, doc, "One request's way")
	d := declared(t)
	way := []struct{ pkg, name string }{
		// triage
		{"jetstream", "Worker.pull"}, {"jetstream", "Worker.handle"}, {"jetstream", "Worker.settledBefore"},
		{"pipeline", "Pipeline.Triage"}, {"objstore", "ReadHeadStatted"}, {"pipeline", "DetectBytes"},
		{"jetstream", "Worker.settle"}, {"jetstream", "rules.decide"}, {"jetstream", "settler.apply"},
		// a lane
		{"jetstream", "Worker.pull"}, {"jetstream", "Worker.handle"}, {"jetstream", "Worker.settledBefore"},
		{"pipeline", "Pipeline.Process"}, {"pipeline", "Pipeline.prepare"}, {"pipeline", "Pipeline.check"},
		{"pipeline", "fetcher.download"}, {"pipeline", "Pipeline.scan"}, {"pipeline", "reuser.recall"},
		{"pipeline", "Pipeline.detect"}, {"pipeline", "Pipeline.admit"}, {"pipeline", "Pipeline.transform"},
		{"pipeline", "Pipeline.upload"},
		// the settlement
		{"jetstream", "Worker.settle"}, {"jetstream", "settler.settle"}, {"jetstream", "rules.decide"},
		{"jetstream", "settler.apply"}, {"pipeline", "GaveUpAfter"},
	}
	at := 0
	for _, s := range way {
		short := s.name[strings.LastIndex(s.name, ".")+1:]
		if !d.has(s.pkg, s.name) {
			t.Errorf("the picture's step %s is not declared in package %s", s.name, s.pkg)
		}
		loc := regexp.MustCompile(`\b` + short + `\b`).FindStringIndex(picture[at:])
		if loc == nil {
			t.Errorf("the picture of one request's way does not name %s (after position %d)", short, at)
			continue
		}
		at += loc[0]
	}
	// From the pull to the ack: every step of the settling side lives in jetstream, in three files.
	for _, f := range []string{"jetstream/worker.go", "jetstream/settle.go", "jetstream/apply.go"} {
		if !strings.Contains(picture, f) {
			t.Errorf("the picture of one request's way does not point the reader at %s", f)
		}
	}
}

func architectureDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sectionPicture is the first fenced block of the doc's section "## title".
func sectionPicture(t *testing.T, doc, title string) string {
	t.Helper()
	i := strings.Index(doc, "## "+title)
	if i < 0 {
		t.Fatalf("docs/architecture.md has no section %q", title)
	}
	blocks := codeBlocks(doc[i:])
	if len(blocks) == 0 {
		t.Fatalf("the section %q of docs/architecture.md has no picture", title)
	}
	return blocks[0]
}

// codeBlocks returns the fenced blocks of a markdown text.
func codeBlocks(doc string) []string {
	parts := strings.Split(doc, "```")
	var out []string
	for i := 1; i < len(parts); i += 2 {
		out = append(out, parts[i])
	}
	return out
}

// Issue 12 item 3: responses are built in one place. Every response the worker publishes starts in
// job/response.go; no other non-test file writes a contracts.Response literal.
func TestResponsesAreBuiltInOnePlace(t *testing.T) {
	found := 0
	for _, rel := range sourceFiles(t) {
		if strings.HasPrefix(rel, "contracts/") || strings.HasPrefix(rel, "examples/") || strings.HasPrefix(rel, "bench/") ||
			strings.HasPrefix(rel, "internal/") {
			continue // the type's own package, and clients that decode responses
		}
		b, err := os.ReadFile(filepath.Join(root(t), rel))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "contracts.Response{"); n > 0 {
			found += n
			if rel != "job/response.go" {
				t.Errorf("%s builds a contracts.Response: responses are built in job/response.go (NewResponse, FailureResponse)", rel)
			}
		}
	}
	if found == 0 {
		t.Fatal("no contracts.Response literal at all: has job/response.go moved?")
	}
}

// Issue 12: the picture of the packages in docs/architecture.md is drawn from the code: each of its
// lines "a, b ──► c, d" says that a and b import exactly c and d of our packages (non-test code), and
// every worker package has its line.
func TestArchitecturePackagePicture(t *testing.T) {
	doc := architectureDoc(t)
	picture := sectionPicture(t, doc, "Packages")
	imports := importers(t)
	ours := func(pkg string) []string {
		var out []string
		for _, imp := range imports[pkg] {
			if strings.HasPrefix(imp, mod) {
				out = append(out, strings.TrimPrefix(imp, mod))
			}
		}
		slices.Sort(out)
		return out
	}
	split := func(s string) []string {
		var out []string
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" && f != "nothing of ours" {
				out = append(out, f)
			}
		}
		return out
	}
	drawn := map[string]bool{}
	for _, line := range strings.Split(picture, "\n") {
		from, to, ok := strings.Cut(line, "──►")
		if !ok {
			continue
		}
		want := split(to)
		slices.Sort(want)
		for _, pkg := range split(from) {
			drawn[pkg] = true
			if _, known := imports[pkg]; !known {
				t.Errorf("the package picture draws %s, which is not a package of the module", pkg)
				continue
			}
			if got := ours(pkg); !slices.Equal(got, want) {
				t.Errorf("the package picture says %s imports %v; it imports %v", pkg, want, got)
			}
		}
	}
	for _, pkg := range []string{"cmd/mediaworker", "app", "console", "jetstream", "pipeline", "job", "objstore", "objstore/s3",
		"objstore/natsobj", "scanner", "transcoder", "transcoder/vips", "contracts", "slots", "progress", "tracing",
		"ingest", "webhooks", "facts", "membudget", "internal/confine"} {
		if !drawn[pkg] {
			t.Errorf("the package picture has no line for %s", pkg)
		}
	}
}

// archtestTests are the tests of this package: the claims of docs/architecture.md.
func archtestTests(t *testing.T) map[string]bool {
	t.Helper()
	dir := filepath.Join(root(t), "internal", "archtest")
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("listing internal/archtest's tests: %v (%d files)", err, len(files))
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") {
				out[fd.Name.Name] = true
			}
		}
	}
	return out
}

// Issue 32 item 7: every claim of docs/architecture.md is held by a test here, and its last section
// says which. A test nobody can find from the page holds a claim nobody reads; a claim whose test is
// gone is held by nothing. So the page's table names every test of this package, and only those.
func TestArchitectureDocNamesItsTests(t *testing.T) {
	doc := architectureDoc(t)
	i := strings.Index(doc, "## What internal/archtest holds")
	if i < 0 {
		t.Fatal("docs/architecture.md has no section \"What internal/archtest holds\"")
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`(Test[A-Za-z0-9_]+)`").FindAllStringSubmatch(doc[i:], -1) {
		named[m[1]] = true
	}
	tests := archtestTests(t)
	for name := range tests {
		if !named[name] {
			t.Errorf("%s holds a claim that the table of docs/architecture.md does not list", name)
		}
	}
	for name := range named {
		if !tests[name] {
			t.Errorf("the table of docs/architecture.md lists %s, which internal/archtest does not declare", name)
		}
	}
}
