package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"path/filepath"
	"sort"
	"testing"
)

// Issue 32: a type with more than about twenty methods is two concepts. The central packages grew by
// adding another slice of the same type for each feature (jetstream.Worker reached 53 methods); this
// holds every type of the module's own code to the bound, so the next feature gets a type of its own.
const maxMethods = 20

func TestTypesStaySmall(t *testing.T) {
	counts := map[string]int{} // "dir.Type" -> methods
	fset := token.NewFileSet()
	for _, rel := range sourceFiles(t) {
		f, err := parser.ParseFile(fset, filepath.Join(root(t), rel), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			typ := fd.Recv.List[0].Type
			if s, ok := typ.(*ast.StarExpr); ok {
				typ = s.X
			}
			if g, ok := typ.(*ast.IndexExpr); ok {
				typ = g.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				counts[path.Dir(rel)+"."+id.Name]++
			}
		}
	}
	if len(counts) < 50 {
		t.Fatalf("only %d types with methods found: did the walk miss the module?", len(counts))
	}
	var big []string
	for name, n := range counts {
		if n > maxMethods {
			big = append(big, name)
		}
	}
	sort.Strings(big)
	for _, name := range big {
		t.Errorf("%s has %d methods (at most %d): cut it by concept", name, counts[name], maxMethods)
	}
}
