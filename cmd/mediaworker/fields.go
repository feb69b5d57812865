package main

import (
	"flag"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/app"
)

// The library packages name settings by their config fields (app.SettingError.Field is a path in
// app.Config, e.g. "NATS.Embedded.DataDir"); people set them by flag, variable or file key. The map
// between the two is read off the bindings themselves: each flag holds a pointer into the Config it was
// bound to, so the field it sets is the one at that address. A new flag needs no entry anywhere.

var (
	fieldFlagsOnce sync.Once
	fieldFlagsMap  map[string]string
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
		out[fv.Addr().Pointer()] = path
	}
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
	if k := fileKeyOf(name); k != "" {
		s += ", " + k
	}
	return s + ")"
}

// fieldPath matches what may be a config field's path in a library's message: NATS.Embedded.Listen,
// Pipeline.TmpDir, HTTPAddr.
var fieldPath = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)*\b`)

// withFlags rewrites the config field paths a message names into the flags, variables and file keys
// that set them, leaving every other word alone.
func withFlags(msg string) string {
	return fieldPath.ReplaceAllStringFunc(msg, func(p string) string {
		// A lone capitalised word (Storage, Lanes) is more likely the start of a sentence than a field.
		if flagOfField(p) == "" || (!strings.Contains(p, ".") && strings.ToUpper(p[:2]) != p[:2]) {
			return p
		}
		return describeField(p)
	})
}
