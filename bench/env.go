package bench

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

// Env is a testing.TB for using the internal/testenv helpers (clamd, media makers) in a program.
// testing.TB cannot be implemented outside package testing (it has an unexported method), so Env
// embeds the interface, left nil, and overrides every method the helpers call. Calling any other
// method panics on the nil interface: that is a bug to fix here, not a benchmark result.
//
// Fatal and Fatalf panic with a *FatalError, which Do turns back into an error; call testenv helpers
// only inside Do, from the goroutine that called it.
type Env struct {
	testing.TB

	name    string
	tmpRoot string
	logf    func(format string, args ...any)

	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// NewEnv returns an Env whose temp dirs go under tmpRoot and whose log lines go to logf.
func NewEnv(name, tmpRoot string, logf func(format string, args ...any)) *Env {
	return &Env{name: name, tmpRoot: tmpRoot, logf: logf}
}

// FatalError is what a testenv helper's Fatal becomes.
type FatalError struct{ Msg string }

func (e *FatalError) Error() string { return e.Msg }

// Do runs fn and returns the failure it reported through Fatal, if any.
func (e *Env) Do(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			var fe *FatalError
			if rerr, ok := r.(error); ok && errors.As(rerr, &fe) {
				err = fe
				return
			}
			panic(r)
		}
	}()
	fn()
	return nil
}

// Close runs the registered cleanups, last first. It is idempotent.
func (e *Env) Close() {
	e.mu.Lock()
	cs := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

func (e *Env) Helper()      {}
func (e *Env) Name() string { return e.name }

func (e *Env) Logf(format string, args ...any) { e.logf(format, args...) }
func (e *Env) Log(args ...any)                 { e.logf("%s", fmt.Sprint(args...)) }

func (e *Env) Errorf(format string, args ...any) {
	e.setFailed()
	e.logf("error: "+format, args...)
}
func (e *Env) Error(args ...any) { e.Errorf("%s", fmt.Sprint(args...)) }

func (e *Env) Fatalf(format string, args ...any) {
	e.setFailed()
	panic(&FatalError{Msg: fmt.Sprintf(format, args...)})
}
func (e *Env) Fatal(args ...any) { e.Fatalf("%s", fmt.Sprint(args...)) }
func (e *Env) FailNow()          { e.Fatalf("FailNow called") }
func (e *Env) Fail()             { e.setFailed() }

// Skip and its variants are failures here: a benchmark run never silently leaves a part out.
func (e *Env) Skip(args ...any)                 { e.Fatalf("skipped: %s", fmt.Sprint(args...)) }
func (e *Env) Skipf(format string, args ...any) { e.Fatalf("skipped: "+format, args...) }
func (e *Env) SkipNow()                         { e.Fatalf("skipped") }
func (e *Env) Skipped() bool                    { return false }

func (e *Env) Failed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failed
}

func (e *Env) setFailed() {
	e.mu.Lock()
	e.failed = true
	e.mu.Unlock()
}

func (e *Env) Cleanup(f func()) {
	e.mu.Lock()
	e.cleanups = append(e.cleanups, f)
	e.mu.Unlock()
}

// TempDir returns a new directory under the Env's temp root, removed by Close.
func (e *Env) TempDir() string {
	if err := os.MkdirAll(e.tmpRoot, 0o755); err != nil {
		e.Fatalf("creating temp root: %v", err)
	}
	dir, err := os.MkdirTemp(e.tmpRoot, "tmp-")
	if err != nil {
		e.Fatalf("creating temp dir: %v", err)
	}
	e.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
