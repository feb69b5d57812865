package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore/natsobj"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// fakeDep is a dependency whose health the test sets, counting how often it is probed.
type fakeDep struct {
	mu     sync.Mutex
	err    error
	probes atomic.Int64
}

func (f *fakeDep) set(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }
func (f *fakeDep) check(context.Context) error {
	f.probes.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// waitReturns reports whether d.Wait returns within d (nil) or is still blocked (the ctx error).
func waitErr(d *Deps, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return d.Wait(ctx)
}

func TestDepsWaitBlocksWhileDownAndResumes(t *testing.T) {
	a, b := &fakeDep{}, &fakeDep{}
	cfg := DepsConfig{Interval: time.Hour, DownInterval: 20 * time.Millisecond, Timeout: time.Second, MinReprobe: 0}
	d, err := NewDeps(cfg, []Probe{{"a", a.check}, {"b", b.check}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	d.Start(context.Background())
	defer d.Close()
	if err := waitErr(d, time.Second); err != nil {
		t.Fatalf("all up: Wait = %v, want nil at once", err)
	}

	// b goes down; the hour-long interval means only Report can notice it.
	b.set(errors.New("connection refused"))
	d.Report(errors.New("scanning: clamd unavailable"))
	testenv.Eventually(t, 10*time.Second, func() error {
		if len(d.Down()) != 1 {
			return fmt.Errorf("down = %+v, want b", d.Down())
		}
		return nil
	})
	if down := d.Down(); down[0].Name != "b" || down[0].Error != "connection refused" {
		t.Fatalf("down = %+v", down)
	}
	if err := waitErr(d, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b down: Wait = %v, want it to block until its context ends", err)
	}

	// A Wait that started while b was down returns once b is back, without anyone calling Report:
	// down dependencies are probed every DownInterval.
	released := make(chan error, 1)
	go func() { released <- waitErr(d, time.Minute) }()
	b.set(nil)
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("Wait after recovery = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait still blocked 30 s after b came back")
	}
	if d.Err() != nil {
		t.Fatalf("Err = %v after recovery", d.Err())
	}
}

func TestDepsReportIsRateLimitedAndCancelEndsWait(t *testing.T) {
	a := &fakeDep{}
	cfg := DepsConfig{Interval: time.Hour, DownInterval: time.Hour, Timeout: time.Second, MinReprobe: time.Hour}
	d, err := NewDeps(cfg, []Probe{{"a", a.check}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	d.Start(context.Background())
	before := a.probes.Load() // Start's first probe
	for range 100 {
		d.Report(errors.New("store unavailable"))
	}
	d.Report(nil) // success: nothing to look at
	d.Close()
	d.Close() // idempotent
	if got := a.probes.Load() - before; got != 0 {
		t.Fatalf("100 reports within MinReprobe of the first probe ran %d probes, want 0", got)
	}

	// Down, and the caller gives up: Wait returns the context's error.
	b := &fakeDep{}
	b.set(errors.New("disk full"))
	d2, _ := NewDeps(cfg, []Probe{{"scratch", b.check}}, zerolog.Nop())
	d2.Start(context.Background())
	defer d2.Close()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- d2.Wait(ctx) }()
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel = %v, want context.Canceled", err)
	}
	if err := d2.Err(); err == nil || err.Error() != "dependencies down: scratch: disk full" {
		t.Fatalf("Err = %v", err)
	}
}

func TestDepsConfigRefusesNonsense(t *testing.T) {
	if _, err := NewDeps(DepsConfig{}, nil, zerolog.Nop()); err == nil {
		t.Error("zero intervals accepted")
	}
	f := &fakeDep{}
	if _, err := NewDeps(DefaultDepsConfig(), []Probe{{"x", f.check}, {"x", f.check}}, zerolog.Nop()); err == nil {
		t.Error("two probes with one name accepted")
	}
}

// The watcher as app builds it, against a real clamd, a real JetStream object store and the real
// scratch directory: stopping clamd stops intake, starting it again resumes it; a scratch floor above
// the free space does too.
func TestDepsWatchRealClamdStopStart(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	nc := testenv.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := natsobj.New(js, natsobj.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	scfg := scanner.DefaultConfig()
	scfg.Addr = clamd.Addr
	s, err := scanner.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Pipeline.TmpDir = t.TempDir()
	a := &App{cfg: cfg, log: zerolog.Nop(), scanner: s, store: store}
	dcfg := DefaultDepsConfig()
	dcfg.Interval = time.Hour // only Report and the down-interval probe: the test says when to look
	d, err := a.watchDeps(context.Background(), dcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := waitErr(d, time.Second); err != nil {
		t.Fatalf("everything up: Wait = %v (%v)", err, d.Err())
	}

	clamd.Stop()
	d.Report(errors.New("scanning: clamd unavailable"))
	testenv.Eventually(t, 30*time.Second, func() error {
		if down := d.Down(); len(down) != 1 || down[0].Name != "clamd" {
			return fmt.Errorf("down = %+v, want clamd", down)
		}
		return nil
	})
	if err := waitErr(d, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("clamd stopped: Wait = %v, want blocked", err)
	}
	released := make(chan error, 1)
	go func() { released <- waitErr(d, 2*time.Minute) }()
	start := time.Now()
	clamd.Start()
	if err := <-released; err != nil {
		t.Fatalf("clamd started again, Wait = %v (%v)", err, d.Err())
	}
	t.Logf("intake resumed %s after clamd.Start returned (clamd took %s to start)", time.Since(start).Round(time.Millisecond), clamd.StartupTime.Round(time.Millisecond))

	a.cfg.Pipeline.MinFreeBytes = 1 << 62
	d.Report(errors.New("writing scratch: no space left on device"))
	testenv.Eventually(t, 30*time.Second, func() error {
		if down := d.Down(); len(down) != 1 || down[0].Name != "scratch_disk" {
			return fmt.Errorf("down = %+v, want scratch_disk", down)
		}
		return nil
	})
}
