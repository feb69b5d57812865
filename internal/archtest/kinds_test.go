package archtest

import (
	"go/ast"
	"go/token"
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

// Issue 32 item 2: a kind is declared in its own files. Its entry, job/kind_<name>.go, declares its
// Kind constant and registers its Spec (job.Register); its handler, pipeline/kind_<name>.go, registers
// how the pipeline runs it (registerKind). Every kind has both, and nothing registers a kind anywhere
// else: adding a kind is adding its files.
func TestEachKindIsDeclaredInItsOwnFiles(t *testing.T) {
	kindName := map[string]string{} // job's constant → the kind's name ("Image" → "image")
	constFile := map[string]string{}
	jobFiles := parseDir(t, "job")
	for file, f := range jobFiles {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Kind" || len(vs.Values) != len(vs.Names) {
					continue
				}
				for i, n := range vs.Names {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						kindName[n.Name], constFile[n.Name] = strings.Trim(lit.Value, `"`), file
					}
				}
			}
		}
	}
	// registered finds the calls of fn in dir's files: the kind each registers, by file.
	registered := func(dir string, files map[string]*ast.File, fn string, kindOf func(call *ast.CallExpr) ast.Expr) map[string]string {
		out := map[string]string{}
		for file, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != fn || len(call.Args) == 0 {
					return true
				}
				var name string
				switch e := kindOf(call).(type) {
				case *ast.Ident:
					name = e.Name
				case *ast.SelectorExpr:
					name = e.Sel.Name
				}
				kind, known := kindName[name]
				if !known {
					t.Errorf("%s/%s: %s of %s, which is not a kind constant of package job", dir, file, fn, name)
					return true
				}
				if prev, dup := out[kind]; dup {
					t.Errorf("%s registers kind %s twice (%s, %s)", dir, kind, prev, file)
				}
				out[kind] = file
				if want := "kind_" + kind + ".go"; file != want {
					t.Errorf("%s/%s registers kind %s: a kind is registered in its own file, %s/%s", dir, file, kind, dir, want)
				}
				return true
			})
		}
		return out
	}
	entries := registered("job", jobFiles, "Register", func(call *ast.CallExpr) ast.Expr {
		lit, _ := call.Args[0].(*ast.CompositeLit)
		if lit == nil {
			return nil
		}
		for _, el := range lit.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if k, _ := kv.Key.(*ast.Ident); k != nil && k.Name == "Kind" {
					return kv.Value
				}
			}
		}
		return nil
	})
	handlers := registered("pipeline", parseDir(t, "pipeline"), "registerKind", func(call *ast.CallExpr) ast.Expr { return call.Args[0] })
	if len(entries) < 2 {
		t.Fatalf("only %d kinds registered in package job: has the registry moved?", len(entries))
	}
	for name, kind := range kindName {
		if _, ok := entries[kind]; ok && constFile[name] != "kind_"+kind+".go" {
			t.Errorf("job declares kind %s (%s) in %s: a kind's constant lives in its own file, job/kind_%s.go", kind, name, constFile[name], kind)
		}
	}
	for kind := range entries {
		if _, ok := handlers[kind]; !ok {
			t.Errorf("kind %s is registered in job but has no handler: pipeline/kind_%s.go registers it (registerKind)", kind, kind)
		}
	}
	for kind := range handlers {
		if _, ok := entries[kind]; !ok {
			t.Errorf("pipeline handles kind %s, which job does not register: job/kind_%s.go declares it (job.Register)", kind, kind)
		}
	}
}
