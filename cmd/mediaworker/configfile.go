package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The config file (--config FILE, MW_CONFIG) holds every setting of `run` in sections, and the recipes.
// Its values come first: a variable beats the file, a flag beats both. The file is read as a YAML node
// tree rather than decoded into structs, so every error can name the file, line and column and the
// key as written, and so a value is checked against its setting's type as YAML typed it: `width: "256"`
// and `ack_wait: 30` are mistakes to be told of, not strings or nanoseconds to be guessed at.

// fileError is one mistake in the config file, at a position.
type fileError struct {
	path      string
	line, col int
	key       string // dotted, as written: images.high_size, recipes.avatar.images[0].width
	problem   string
}

func (e fileError) Error() string {
	if e.key == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.path, e.line, e.col, e.problem)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.path, e.line, e.col, e.key, e.problem)
}

// configFile is a read config file: where it is and its recipes section, decoded by the caller.
type configFile struct {
	path    string
	recipes *yaml.Node // nil: the file has none
	// webhookEndpoints is webhooks.endpoints (configwebhooks.go), nil when the file has none.
	webhookEndpoints *yaml.Node
}

// errAt makes a fileError at node n.
func (f *configFile) errAt(n *yaml.Node, key, format string, args ...any) fileError {
	return fileError{path: f.path, line: n.Line, col: n.Column, key: key, problem: fmt.Sprintf(format, args...)}
}

// configPathOf finds the config file named by the arguments (--config FILE, --config=FILE) or by
// MW_CONFIG; the arguments win.
func configPathOf(args []string) (path, source string) {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != configFlag {
			continue
		}
		if hasValue {
			return value, "flag"
		}
		if i+1 < len(args) {
			return args[i+1], "flag"
		}
	}
	if v, ok := os.LookupEnv(envName(configFlag)); ok {
		return v, envName(configFlag)
	}
	return "", ""
}

// maxConfigBytes bounds the config file: settings and a thousand recipes fit, and a file read whole
// with no bound (a device, a log named by mistake) would grow the worker's memory until it is killed.
// YAML's node tree takes up to ~200 bytes per byte of a worst-case file (a list of 1s): 256 KiB of it
// adds ~45 MiB, once, at start.
const maxConfigBytes = 256 << 10

// maxAliasNodes bounds what YAML aliases (*name) and merge keys (<<: *name) may expand to. Each alias
// is a copy of its anchor's value, so a few lines that alias aliases describe billions of values.
const maxAliasNodes = 20000

// maxAliasBytes bounds the text those copies hold: a count of values alone lets one 200 KiB scalar,
// aliased 20000 times, stand for 4 GB, which every error that quotes a value (format: *big in each of
// thousands of variants) would write out (config check of a 100 KiB such file: 1.5 GB, 250 MB told).
const maxAliasBytes = 1 << 20

// configReadWait bounds the reading of the config file. A named pipe no one writes to, or a writer that
// never finishes, would block start-up for ever, silently, and SIGTERM would not end it either: the
// worker handles that signal itself, in code that runs once the settings are read.
var configReadWait = 10 * time.Second

// readConfigBytes reads at most maxConfigBytes of the file, refusing a larger one without reading it
// whole, within configReadWait.
func readConfigBytes(path string) ([]byte, error) {
	type read struct {
		data []byte
		err  error
	}
	done := make(chan read, 1)
	go func() { // left behind only if the read never ends; the command then ends with the error
		data, err := readConfigBytesNow(path)
		done <- read{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-time.After(configReadWait):
		return nil, fmt.Errorf("reading config file: %s: not read within %s (a named pipe that nothing writes to, or a writer that never finishes?)", path, configReadWait)
	}
}

func readConfigBytesNow(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	defer fh.Close()
	tooBig := fmt.Errorf("reading config file: %s: config file larger than %d KiB; a config file holds settings and recipes: is it the right file?", path, maxConfigBytes>>10)
	if st, err := fh.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > maxConfigBytes {
		return nil, tooBig
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	if len(data) > maxConfigBytes {
		return nil, tooBig
	}
	return data, nil
}

// loadConfigFile reads the file at path and sets the command's flags from it, recording each one's
// source as file:line. Every mistake is reported, each with its position, the recipes' with the
// settings': the file is returned with them (its good settings set), nil when it could not be read
// or is not YAML.
func (c *command) loadConfigFile(path string) (*configFile, error) {
	data, err := readConfigBytes(path)
	if err != nil {
		return nil, err
	}
	f := &configFile{path: path}
	notYAML := func(err error) error {
		// yaml's own message says "yaml: line N: ..."; keep it, prefixed by the file.
		return fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, next yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, notYAML(err)
	}
	// Only the first document would be read: settings in a second (after ---) would be dropped
	// without a word, their mistakes untold.
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, notYAML(err)
	case len(next.Content) > 0 && (next.Content[0].Tag != "!!null" || next.Content[0].Value != ""):
		return nil, f.errAt(next.Content[0], "", "a second YAML document (after ---): the worker reads one; write every setting in the first")
	}
	if len(doc.Content) == 0 {
		return f, nil // an empty file sets nothing
	}
	root, err := f.expand(doc.Content[0])
	if err != nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		return nil, f.errAt(root, "", "the file must be a mapping of sections (%s), got %s", sectionNames(), kindName(root))
	}
	var errs []error
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := root.Content[i], root.Content[i+1]
		if seen[kn.Value] {
			errs = append(errs, f.errAt(kn, kn.Value, "appears twice"))
			continue
		}
		seen[kn.Value] = true
		if strings.HasPrefix(kn.Value, extensionPrefix) {
			continue // a place for anchors (x-variants: &v ...), as in compose files
		}
		if kn.Value == recipesSection {
			f.recipes = vn
			_, rerrs := f.decodeRecipes()
			errs = append(errs, rerrs...)
			continue
		}
		sec, ok := lookupSection(kn.Value)
		if !ok {
			names := append(strings.Split(sectionNames(), ", "), configFlag)
			errs = append(errs, f.errAt(kn, "", "%s (a section named %s… is ignored: a place for YAML anchors)", unknownKey("section", kn.Value, names[:len(names)-1]), extensionPrefix))
			continue
		}
		if vn.Kind != yaml.MappingNode {
			if vn.Tag == "!!null" {
				continue // an empty section
			}
			errs = append(errs, f.errAt(vn, sec.name, "must be a mapping of settings (%s), got %s", sec.keyNames(), kindName(vn)))
			continue
		}
		errs = append(errs, c.loadSection(f, sec, vn)...)
	}
	// In the file's order, whichever part found them.
	sort.SliceStable(errs, func(i, j int) bool {
		var a, b fileError
		if !errors.As(errs[i], &a) || !errors.As(errs[j], &b) {
			return false
		}
		return a.line < b.line || a.line == b.line && a.col < b.col
	})
	return f, errors.Join(errs...)
}

// extensionPrefix marks top-level keys the worker ignores, so anchors have a place to be defined.
const extensionPrefix = "x-"

// expand returns a copy of n with its aliases replaced by their anchors' values and its merge keys
// (<<: *base, <<: [*a, *b]) by the keys they bring, a key written beside the merge winning over a
// merged one. The copies may hold at most maxAliasNodes values and maxAliasBytes of text in all.
func (f *configFile) expand(n *yaml.Node) (*yaml.Node, error) {
	e := expander{f: f, budget: maxAliasNodes, bytes: maxAliasBytes, inside: map[*yaml.Node]bool{}}
	return e.node(n)
}

type expander struct {
	f      *configFile
	budget int
	bytes  int                 // the text the copies may still hold (maxAliasBytes)
	inside map[*yaml.Node]bool // the anchors being copied, to refuse one that holds an alias to itself
}

func (e *expander) node(n *yaml.Node) (*yaml.Node, error) {
	if len(e.inside) > 0 {
		if e.budget--; e.budget < 0 {
			return nil, e.f.errAt(n, "", "aliases (*name) and merge keys (<<) expand to more than %d values; write the values out instead", maxAliasNodes)
		}
		if e.bytes -= len(n.Value); e.bytes < 0 {
			return nil, e.f.errAt(n, "", "aliases (*name) and merge keys (<<) expand to more than %d KiB of text; write the values out instead", maxAliasBytes>>10)
		}
	}
	switch n.Kind {
	case yaml.AliasNode:
		a := n.Alias
		if a == nil {
			return nil, e.f.errAt(n, "", "alias *%s names no anchor", n.Value)
		}
		if e.inside[a] {
			return nil, e.f.errAt(n, "", "alias *%s is inside the value it names", n.Value)
		}
		e.inside[a] = true
		defer delete(e.inside, a)
		return e.node(a)
	case yaml.MappingNode:
		return e.mapping(n)
	}
	cp := *n
	cp.Content = make([]*yaml.Node, 0, len(n.Content))
	for _, c := range n.Content {
		x, err := e.node(c)
		if err != nil {
			return nil, err
		}
		cp.Content = append(cp.Content, x)
	}
	return &cp, nil
}

// mapping expands a mapping: its own keys, then those its merge keys bring that it lacks.
func (e *expander) mapping(n *yaml.Node) (*yaml.Node, error) {
	cp := *n
	cp.Content = make([]*yaml.Node, 0, len(n.Content))
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, n.Content[i+1])
			continue
		}
		for _, c := range n.Content[i : i+2] {
			x, err := e.node(c)
			if err != nil {
				return nil, err
			}
			cp.Content = append(cp.Content, x)
		}
	}
	has := map[string]bool{}
	for i := 0; i < len(cp.Content); i += 2 {
		has[cp.Content[i].Value] = true
	}
	for _, m := range merges {
		v, err := e.node(m)
		if err != nil {
			return nil, err
		}
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = v.Content
		}
		for _, s := range sources {
			if s.Kind != yaml.MappingNode {
				return nil, e.f.errAt(m, "", "a merge key (<<) takes a mapping or a list of mappings, got %s", kindName(s))
			}
			for i := 0; i+1 < len(s.Content); i += 2 {
				if k := s.Content[i]; !has[k.Value] {
					has[k.Value] = true
					cp.Content = append(cp.Content, k, s.Content[i+1])
				}
			}
		}
	}
	return &cp, nil
}

// loadSection sets the flags of one section's keys.
func (c *command) loadSection(f *configFile, sec section, m *yaml.Node) []error {
	var errs []error
	known := make([]string, 0, len(sec.settings))
	for _, k := range sec.keys() {
		known = append(known, k.key)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		dotted := sec.name + "." + kn.Value
		if sec.name == webhooksSection && kn.Value == webhookEndpointsKey {
			f.webhookEndpoints = vn // a list, not a flag: decodeWebhookEndpoints reads it
			continue
		}
		k, ok := sec.lookup(kn.Value)
		if !ok {
			errs = append(errs, f.errAt(kn, dotted, "%s", unknownKey("key", kn.Value, known)))
			continue
		}
		if seen[k.key] {
			errs = append(errs, f.errAt(kn, dotted, "appears twice"))
			continue
		}
		seen[k.key] = true
		fl := c.fs.Lookup(k.flag)
		if fl == nil {
			continue // a setting this command does not use (submit reads the file for nats and storage)
		}
		v, problem := scalarFor(fl, vn)
		if problem == "" {
			if err := c.set(k.flag, v); err != nil {
				problem = valueProblem(fl, err)
			}
		}
		if problem != "" {
			errs = append(errs, f.errAt(vn, dotted, "%s (--%s)", problem, k.flag))
			continue
		}
		c.source[k.flag] = fmt.Sprintf("%s:%d", f.path, kn.Line)
		c.pos[k.flag] = fmt.Sprintf("%s:%d:%d", f.path, vn.Line, vn.Column)
	}
	return errs
}

// scalarFor checks that YAML typed n as the flag's type and returns the text to Set it with, or what
// is wrong. Durations and sizes are strings with units ("90s", "500MiB"); a size may also be a plain
// number of bytes.
func scalarFor(fl *flag.Flag, n *yaml.Node) (string, string) {
	if n.Kind != yaml.ScalarNode {
		return "", "must be a single value, got " + kindName(n)
	}
	if n.Tag == "!!null" {
		return "", "has no value (remove the key to keep the default)"
	}
	if _, ok := fl.Value.(bytesFlag); ok {
		if n.Tag == "!!int" || n.Tag == "!!str" {
			return n.Value, ""
		}
		return "", fmt.Sprintf("must be a size such as 500MiB or a number of bytes, got %s", describeScalar(n))
	}
	g, ok := fl.Value.(flag.Getter)
	if !ok {
		return n.Value, ""
	}
	switch g.Get().(type) {
	case bool:
		if n.Tag != "!!bool" {
			return "", "must be true or false, got " + describeScalar(n)
		}
	case int, int64, uint, uint64:
		if n.Tag != "!!int" {
			return "", "must be a whole number, got " + describeScalar(n)
		}
	case float64:
		if n.Tag != "!!int" && n.Tag != "!!float" {
			return "", "must be a number, got " + describeScalar(n)
		}
	case time.Duration:
		if n.Tag != "!!str" {
			return "", fmt.Sprintf("must be a duration with its unit such as 90s, 5m or 1h30m, got %s", describeScalar(n))
		}
	case string:
		if n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float" {
			return "", "must be text, got " + describeScalar(n)
		}
	}
	return n.Value, ""
}

// describeScalar names a scalar's YAML type and value, for errors.
func describeScalar(n *yaml.Node) string {
	switch n.Tag {
	case "!!str":
		return strconv.Quote(n.Value) + " (text)"
	case "!!int", "!!float":
		return "the number " + n.Value
	case "!!bool":
		return n.Value
	}
	return n.Value
}

// kindName names a node's shape, for errors.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	if n.Tag == "!!null" {
		return "nothing"
	}
	return describeScalar(n)
}
