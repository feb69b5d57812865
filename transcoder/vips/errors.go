package vips

// #include "shim.h"
import "C"

import (
	"errors"
	"regexp"
	"strings"
	"sync"
	"unsafe"
)

// opLock keeps libvips' process-global error buffer readable per operation: every operation holds
// it shared while it runs, and only the repeat of a failed one holds it exclusively (see run).
var opLock sync.RWMutex

// Error is a libvips operation that failed on a file, with what libvips said about it.
type Error struct {
	Op  string // what was being done: "reading the header", "decoding", "resizing", "cropping", "encoding webp", ...
	Msg string // libvips' messages on one line, the file's path replaced by "the file"; may be empty
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return e.Op + " failed and libvips gave no reason"
	}
	return e.Op + ": " + e.Msg
}

// run runs op, which reports whether it succeeded, under the shared lock. A failed op is run once
// more alone, holding the exclusive lock, with the error buffer cleared first: then the buffer holds
// that op's messages only, whatever other jobs are doing, so the same file always gets the same
// message. op must be safe to repeat (it only reads its input and returns fresh results). If the
// repeat succeeds (a failure that does not come from the file, such as memory running short), its
// result stands.
func run(what, path string, op func() bool) error {
	opLock.RLock()
	ok := op()
	opLock.RUnlock()
	if ok {
		return nil
	}
	opLock.Lock()
	defer opLock.Unlock()
	C.mw_error_clear()
	if op() {
		// Messages of a successful op (heifload's "bad seek") must not be read as the next one's.
		C.mw_error_clear()
		return nil
	}
	return &Error{Op: what, Msg: cleanMessage(takeMessage(), path)}
}

// takeMessage returns libvips' error buffer and clears it (one locked step inside libvips).
func takeMessage() string {
	p := C.mw_error()
	defer C.mw_gfree(unsafe.Pointer(p))
	return C.GoString(p)
}

// takeError returns libvips' error buffer as an error and clears it; for Init, which runs once
// before any operation.
func takeError() error {
	msg := cleanMessage(takeMessage(), "")
	if msg == "" {
		msg = "libvips gave no reason"
	}
	return errors.New(msg)
}

// quotedPath matches a quoted absolute path, as libvips quotes file names ("/tmp/job-1/input").
var quotedPath = regexp.MustCompile(`"/[^"]*"`)

// cleanMessage puts libvips' "domain: text" lines on one line, drops repeated lines (several
// loaders report the same failure on their way up) and replaces the file's path, which is a scratch
// path meaningless to the person reading the message, with "the file".
func cleanMessage(msg, path string) string {
	if path != "" {
		msg = strings.ReplaceAll(msg, `"`+path+`"`, "the file")
		msg = strings.ReplaceAll(msg, path, "the file")
	}
	msg = quotedPath.ReplaceAllString(msg, "the file")
	var lines []string
	seen := map[string]bool{}
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		lines = append(lines, l)
	}
	return strings.Join(lines, "; ")
}
