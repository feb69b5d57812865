package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// parseDir parses the non-test Go files of one package directory (relative to the module's root), by
// file name.
func parseDir(t *testing.T, dir string) map[string]*ast.File {
	t.Helper()
	out := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, rel := range sourceFiles(t) {
		if filepath.ToSlash(filepath.Dir(rel)) != dir {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root(t), rel), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parsing %s: %v", rel, err)
		}
		out[filepath.Base(rel)] = f
	}
	if len(out) == 0 {
		t.Fatalf("no Go files in %s: has the package moved?", dir)
	}
	return out
}

// funcKey is "Type.method" for a method and "name" for a function.
func funcKey(fd *ast.FuncDecl) string {
	if fd.Recv != nil && len(fd.Recv.List) == 1 {
		return recvType(fd.Recv.List[0].Type) + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// clockAndIO are the package-level calls that read the clock, draw a random number or do I/O.
var clockAndIO = map[string]func(name string) bool{
	"time": func(n string) bool {
		return slices.Contains([]string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick"}, n)
	},
	"rand":    func(string) bool { return true },
	"os":      func(string) bool { return true },
	"net":     func(string) bool { return true },
	"http":    func(string) bool { return true },
	"context": func(string) bool { return true },
}

// natsCalls are the methods of a connection, a JetStream context, a consumer, a bucket or a message
// that reach the server.
var natsCalls = map[string]bool{
	"Publish": true, "PublishMsg": true, "PublishAsync": true, "PublishMsgAsync": true, "Ack": true, "DoubleAck": true,
	"Nak": true, "NakWithDelay": true, "Term": true, "TermWithReason": true, "InProgress": true, "Conn": true,
	"KeyValue": true, "Stream": true, "Consumer": true, "Fetch": true, "Next": true, "Request": true,
	"Subscribe": true, "Flush": true, "Purge": true, "DeleteMsg": true, "GetMsg": true, "Info": true,
	"Create": true, "Update": true, "Delete": true, "Metadata": true,
}

// Issue 32 item 3: settlement is a pure decide and an apply that only executes. decide, and every
// method of the rules it reads (the events, the ids, the dead letter), together with every function of
// package jetstream they call, read no clock, draw no random number, do no I/O and call nothing of
// NATS: what they know of the world comes in facts, gathered before. So a settlement can be read, and
// tested, as a function of (delivery, facts, outcome).
func TestDecideIsPure(t *testing.T) {
	files := parseDir(t, "jetstream")
	funcs := map[string]*ast.FuncDecl{}
	fileOf := map[string]string{}
	var rulesType *ast.TypeSpec
	for name, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				funcs[funcKey(d)], fileOf[funcKey(d)] = d, name
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == "rules" {
						rulesType = ts
					}
				}
			}
		}
	}
	if funcs["rules.decide"] == nil || rulesType == nil {
		t.Fatal("no rules.decide in package jetstream: has the settlement moved?")
	}
	// What decide reads besides its arguments holds no handle on the world.
	ast.Inspect(rulesType.Type, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && (x.Name == "nats" || x.Name == "jetstream" || x.Name == "context") {
				t.Errorf("the rules hold a %s.%s: decide must know the world only through facts", x.Name, n.Sel.Name)
			}
		case *ast.Ident:
			if slices.Contains([]string{"settler", "settledMemory", "Worker", "backlog", "rescueClaims", "tally"}, n.Name) {
				t.Errorf("the rules hold a %s: decide must know the world only through facts", n.Name)
			}
		}
		return true
	})
	var queue []string
	for key := range funcs {
		if strings.HasPrefix(key, "rules.") {
			queue = append(queue, key)
		}
	}
	sort.Strings(queue)
	seen := map[string]bool{}
	for len(queue) > 0 {
		key := queue[0]
		queue = queue[1:]
		if seen[key] {
			continue
		}
		seen[key] = true
		fd := funcs[key]
		where := fileOf[key] + ": " + key
		recv := ""
		if fd.Recv != nil && len(fd.Recv.List[0].Names) == 1 {
			recv = fd.Recv.List[0].Names[0].Name
		}
		for _, p := range fd.Type.Params.List {
			if sel, ok := p.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Context" {
				t.Errorf("%s takes a context: decide's side does no I/O", where)
			}
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch fun := call.Fun.(type) {
			case *ast.Ident:
				if funcs[fun.Name] != nil {
					queue = append(queue, fun.Name)
				}
			case *ast.SelectorExpr:
				name := fun.Sel.Name
				if x, ok := fun.X.(*ast.Ident); ok {
					if banned := clockAndIO[x.Name]; banned != nil && banned(name) {
						t.Errorf("%s calls %s.%s: decide's side reads no clock and does no I/O (facts carry what it needs)", where, x.Name, name)
					}
					if x.Name == recv && funcs["rules."+name] != nil {
						queue = append(queue, "rules."+name)
					}
				}
				if natsCalls[name] {
					t.Errorf("%s calls .%s: decide's side calls nothing of NATS (apply does)", where, name)
				}
			}
			return true
		})
	}
	if !seen["fitOutcome"] || !seen["rules.events"] {
		t.Fatalf("the walk from decide reached only %d functions: has decide changed shape?", len(seen))
	}
}

// callsError reports the calls of an Error() method in n: an error's text.
func callsError(n ast.Node) []token.Pos {
	var at []token.Pos
	ast.Inspect(n, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && len(call.Args) == 0 {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Error" {
				at = append(at, call.Pos())
			}
		}
		if id, ok := n.(*ast.Ident); ok && strings.Contains(strings.ToLower(id.Name), "stderr") {
			at = append(at, id.Pos())
		}
		return true
	})
	return at
}

// Issue 32 item 4: public words are set where an error is made, never read back from its text. The
// sentences the pipeline chooses for a failure of the worker or a dependency (causeSaid and the
// sentences it picks from the error's types), the public side of the pipeline's and the scanner's
// errors, and every answer of the scan API are made without calling an error's Error() and without
// reading a tool's stderr: an error's text carries endpoints, scratch paths and a library's words.
func TestPublicWordsAreNotReadFromText(t *testing.T) {
	sentences := map[string][]string{
		"pipeline": {"causeSaid", "scannerSentence", "toolSentence", "diskSentence", "notStarted", "unreachable",
			"transient", "refuse", "refusedBy", "storeRefused", "scanRefused", "Error.Public", "words.Public"},
		"scanner": {"Error.Public"},
	}
	for dir, names := range sentences {
		found := map[string]bool{}
		for name, f := range parseDir(t, dir) {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || !slices.Contains(names, funcKey(fd)) {
					continue
				}
				found[funcKey(fd)] = true
				if at := callsError(fd.Body); len(at) > 0 {
					t.Errorf("%s/%s: %s reads an error's text or a tool's stderr (%d places): a public sentence is set where the error is made",
						dir, name, funcKey(fd), len(at))
				}
			}
		}
		for _, n := range names {
			if !found[n] {
				t.Errorf("%s declares no %s: has the making of public words moved? (update this test and docs/architecture.md)", dir, n)
			}
		}
	}
	// The scan API's answers: every sentence it sends (scanVerdict.Error, receiveError.public).
	answers := 0
	for name, f := range parseDir(t, "app") {
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			typ, ok := lit.Type.(*ast.Ident)
			if !ok || (typ.Name != "scanVerdict" && typ.Name != "receiveError") {
				return true
			}
			for _, el := range lit.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				if key, _ := kv.Key.(*ast.Ident); key == nil || (key.Name != "Error" && key.Name != "public") {
					continue
				}
				answers++
				if at := callsError(kv.Value); len(at) > 0 {
					t.Errorf("app/%s: the scan API answers an error's text (%s{%s: …}): answer pipeline.PublicMessage or a sentence of its own",
						name, typ.Name, kv.Key.(*ast.Ident).Name)
				}
			}
			return true
		})
	}
	if answers < 5 {
		t.Fatalf("only %d answers of the scan API found: has app/scan.go moved?", answers)
	}
}

// Issue 32 item 5: each setting of `run` is declared once, in cmd/mediaworker/settings.go's table, and
// flags, --help, `config`, the file and the docs are derived from it. So no flag is registered by hand
// anywhere in cmd/mediaworker except where the table is bound (bindSetting), --config itself
// (bindConfig, durationVar's helper) and the options of the commands other than run, which are theirs.
func TestSettingsAreDeclaredOnce(t *testing.T) {
	registers := map[string]bool{
		"StringVar": true, "BoolVar": true, "IntVar": true, "Int64Var": true, "UintVar": true, "Uint64Var": true,
		"Float64Var": true, "DurationVar": true, "Var": true, "TextVar": true, "Func": true, "BoolFunc": true,
		"String": true, "Bool": true, "Int": true, "Int64": true, "Uint": true, "Uint64": true, "Float64": true, "Duration": true,
	}
	allowed := map[string]bool{"bindSetting": true, "bindConfig": true, "durationVar": true}
	otherCommand := func(fn string) bool {
		return strings.HasPrefix(fn, "cmd") && fn != "cmdRun" && fn != "cmdConfig" && fn != "cmdConfigCheck"
	}
	seen := 0
	for name, f := range parseDir(t, "cmd/mediaworker") {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				var onFlagSet bool
				switch fun := call.Fun.(type) {
				case *ast.SelectorExpr:
					// fs.StringVar, c.fs.BoolVar: a FlagSet's registration.
					switch x := fun.X.(type) {
					case *ast.Ident:
						onFlagSet = x.Name == "fs" && registers[fun.Sel.Name]
					case *ast.SelectorExpr:
						onFlagSet = x.Sel.Name == "fs" && registers[fun.Sel.Name]
					}
				case *ast.Ident:
					onFlagSet = fun.Name == "durationVar"
				}
				if !onFlagSet {
					return true
				}
				seen++
				if !allowed[fd.Name.Name] && !otherCommand(fd.Name.Name) {
					t.Errorf("cmd/mediaworker/%s: %s registers a flag by hand: declare the setting once in settings.go's table", name, funcKey(fd))
				}
				return true
			})
		}
	}
	if seen < 5 {
		t.Fatalf("only %d flag registrations found in cmd/mediaworker: has the table moved?", seen)
	}
}
