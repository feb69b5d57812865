package main

import (
	"flag"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/mediaworker/mediaworker/app"
)

// The library packages name settings by their config fields (app.SettingError.Field is a path in
// app.Config, e.g. "NATS.Embedded.DataDir"); people set them by flag, variable or file key. The map
// between the two is read off the bindings themselves: each flag holds a pointer into the Config it was
// bound to, so the field it sets is the one at that address. A new flag needs no entry anywhere.

var (
	fieldFlagsOnce sync.Once
	fieldFlagsMap  map[string]string
	runFallbacks   map[string][]string // the standard variables each flag also reads (NATS_URL, ...)
)

// flagOfField returns the flag that sets the app.Config field at path, "" when none does.
func flagOfField(path string) string {
	fieldFlagsOnce.Do(func() {
		cfg := app.DefaultConfig()
		c := newCommand("run", "", "")
		bindRunSettings(c, &cfg)
		addrs := map[uintptr]string{}
		fieldAddrs(reflect.ValueOf(&cfg).Elem(), "", addrs)
		fieldFlagsMap = map[string]string{}
		runFallbacks = c.fallbacks
		c.fs.VisitAll(func(f *flag.Flag) {
			if _, alias := c.aliases[f.Name]; alias {
				return
			}
			if p, ok := addrs[valueAddr(f.Value)]; ok {
				fieldFlagsMap[p] = f.Name
			}
		})
	})
	return fieldFlagsMap[path]
}

// fieldAddrs records the address of every leaf field under v, by its dotted path.
func fieldAddrs(v reflect.Value, prefix string, out map[uintptr]string) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f, fv := t.Field(i), v.Field(i)
		path := f.Name
		if prefix != "" {
			path = prefix + "." + f.Name
		}
		if fv.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Time{}) {
			fieldAddrs(fv, path, out)
			continue
		}
		if isLaneMap(fv) {
			// Per-kind settings (PerLane, Streams.Lanes): each kind's as path[kind].
			iter := fv.MapRange()
			for iter.Next() {
				if e := iter.Value(); !e.IsNil() {
					fieldAddrs(e.Elem(), path+"["+iter.Key().String()+"]", out)
				}
			}
			continue
		}
		out[fv.Addr().Pointer()] = path
	}
}

// isLaneMap reports whether v is a map of settings by kind: string keys, pointers to structs.
func isLaneMap(v reflect.Value) bool {
	t := v.Type()
	return t.Kind() == reflect.Map && t.Key().Kind() == reflect.String &&
		t.Elem().Kind() == reflect.Pointer && t.Elem().Elem().Kind() == reflect.Struct
}

// valueAddr is the address a flag's value writes to.
func valueAddr(v flag.Value) uintptr {
	if b, ok := v.(bytesFlag); ok {
		return reflect.ValueOf(b.p).Pointer()
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		return rv.Pointer()
	}
	return 0
}

// describeField names a config field as a person sets it: "--flag (MW_FLAG, section.key)", or the
// path itself when no flag sets it.
func describeField(path string) string {
	name := flagOfField(path)
	if name == "" {
		return path
	}
	s := "--" + name + " (" + envName(name)
	if fb := runFallbacks[name]; len(fb) > 0 {
		s += ", " + strings.Join(fb, ", ")
	}
	if k := fileKeyOf(name); k != "" {
		s += ", " + k
	}
	return s + ")"
}

// fieldPath matches what may be a config field's path in a library's message: NATS.Embedded.Listen,
// Pipeline.TmpDir, HTTPAddr, Config.Lanes[image].AckWait.
var fieldPath = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*(?:\[[a-z0-9_-]+\])?(?:\.[A-Z][A-Za-z0-9]*(?:\[[a-z0-9_-]+\])?)*`)

// typePaths says where in app.Config each library config type sits, so a message that names
// EmbeddedConfig.Listen (as package jetstream knows it) is told as the flag that sets
// NATS.Embedded.Listen. A bare Config is tried at each place a type of that name sits.
var typePaths = map[string][]string{
	"EmbeddedConfig":   {"NATS.Embedded"},
	"ClientAuth":       {"NATS.Auth"},
	"WorkerConfig":     {"Worker"},
	"URLSigningConfig": {"URLSigning"},
	"ScanAPIConfig":    {"ScanAPI"},
	"ImageConfig":      {"Images"},
	"VideoConfig":      {"Videos"},
	"Config":           {"", "Streams", "Pipeline", "Scanner", "S3", "NATSObj", "Ingest"},
}

// resolveField returns the app.Config path a message's name stands for, "" when none sets a flag.
func resolveField(p string) string {
	if flagOfField(p) != "" {
		return p
	}
	typ, rest, ok := strings.Cut(p, ".")
	if !ok {
		return ""
	}
	for _, base := range typePaths[typ] {
		full := rest
		if base != "" {
			full = base + "." + rest
		}
		if flagOfField(full) != "" {
			return full
		}
	}
	return ""
}

// laneSlots matches how package jetstream names a lane's slots, WorkerConfig.Lanes[image], which `run`
// sets from PerLane[image].Slots.
var laneSlots = regexp.MustCompile(`WorkerConfig\.Lanes\[([a-z0-9_-]+)\]`)

// withFlags rewrites the config field paths a message names into the flags, variables and file keys
// that set them, leaving every other word alone. A name already in parentheses is told inside them.
func withFlags(msg string) string {
	msg = laneSlots.ReplaceAllString(msg, "PerLane[$1].Slots")
	var b strings.Builder
	last := 0
	for _, loc := range fieldPath.FindAllStringIndex(msg, -1) {
		p := msg[loc[0]:loc[1]]
		// A lone capitalised word (Storage, Lanes) is more likely the start of a sentence than a field.
		if !strings.Contains(p, ".") && strings.IndexFunc(p[1:], unicode.IsUpper) < 0 {
			continue
		}
		full := resolveField(p)
		if full == "" {
			continue
		}
		b.WriteString(msg[last:loc[0]])
		if loc[0] > 0 && msg[loc[0]-1] == '(' && loc[1] < len(msg) && msg[loc[1]] == ')' {
			b.WriteString(strings.TrimSuffix(strings.Replace(describeField(full), " (", ", ", 1), ")"))
		} else {
			b.WriteString(describeField(full))
		}
		last = loc[1]
	}
	b.WriteString(msg[last:])
	return b.String()
}

// toldError is a library's error told in the words a person sets things with (withFlags).
type toldError struct{ err error }

func (e toldError) Error() string { return withFlags(e.err.Error()) }
func (e toldError) Unwrap() error { return e.err }
