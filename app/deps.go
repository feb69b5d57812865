package app

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/rs/zerolog"
)

// A job that meets a dependency outage (clamd restarting, the object store away, scratch space full)
// can only fail and be redelivered: each such delivery burns one of MaxDeliver, and a long enough
// outage dead-letters valid uploads. The Deps watcher lets the pull loop stop taking work instead: it
// probes each dependency on an interval (and at once when a job reports trouble), and Wait blocks while
// any is down, so nothing is pulled until every dependency answers again.

// The pull loop's admission check (jetstream.Admission) is exactly Wait.
var _ interface{ Wait(context.Context) error } = (*Deps)(nil)

// Probe checks one dependency; nil means it is usable.
type Probe struct {
	Name  string
	Check func(ctx context.Context) error
}

// DepsConfig sets how often the watcher probes.
type DepsConfig struct {
	Interval     time.Duration // between probes while everything is up
	DownInterval time.Duration // between probes while something is down, so work resumes promptly
	Timeout      time.Duration // budget of one probe; a probe that takes longer counts as down
	MinReprobe   time.Duration // Report probes at most this often, however many jobs report at once
}

// DefaultDepsConfig probes every 10 s, every second while something is down, 5 s per probe.
func DefaultDepsConfig() DepsConfig {
	return DepsConfig{Interval: 10 * time.Second, DownInterval: time.Second, Timeout: 5 * time.Second, MinReprobe: 500 * time.Millisecond}
}

// Validate checks the settings.
func (c DepsConfig) Validate() error {
	if c.Interval <= 0 || c.DownInterval <= 0 || c.Timeout <= 0 || c.MinReprobe < 0 {
		return fmt.Errorf("dependency probe interval, down interval and timeout must be positive, got %s, %s, %s", c.Interval, c.DownInterval, c.Timeout)
	}
	return nil
}

// DepCheck is one dependency's last probe result.
type DepCheck struct {
	Name  string
	OK    bool
	Error string
	Since time.Time // when it last changed between up and down
}

// Deps watches the dependencies jobs need. Its zero value is not usable; build it with NewDeps and
// start it with Start.
type Deps struct {
	cfg    DepsConfig
	probes []Probe
	log    zerolog.Logger

	mu      sync.Mutex
	state   map[string]DepCheck
	changed chan struct{} // closed (and replaced) whenever the set of down dependencies changes
	kick    chan struct{} // Report asks for a probe now

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// NewDeps builds a watcher of probes. Every dependency counts as up until its first probe says
// otherwise: an idle worker takes work at once, and a down one is found by the first probe (which
// Start runs before returning) or by the first job that reports it.
func NewDeps(cfg DepsConfig, probes []Probe, log zerolog.Logger) (*Deps, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, p := range probes {
		if p.Name == "" || p.Check == nil || names[p.Name] {
			return nil, fmt.Errorf("dependency probe %q: needs a unique name and a check", p.Name)
		}
		names[p.Name] = true
	}
	d := &Deps{cfg: cfg, probes: probes, log: log, state: map[string]DepCheck{},
		changed: make(chan struct{}), kick: make(chan struct{}, 1)}
	now := time.Now()
	for _, p := range probes {
		d.state[p.Name] = DepCheck{Name: p.Name, OK: true, Since: now}
	}
	return d, nil
}

// Start probes every dependency once, then keeps probing in the background until ctx ends or Close.
func (d *Deps) Start(ctx context.Context) {
	ctx, d.stop = context.WithCancel(ctx)
	d.done = make(chan struct{})
	d.probeAll(ctx)
	go d.run(ctx)
}

// Close stops the probing. It is idempotent.
func (d *Deps) Close() {
	d.closeOnce.Do(func() {
		if d.stop != nil {
			d.stop()
			<-d.done
		}
	})
}

// Wait returns nil at once when every dependency is up; otherwise it blocks until they all are, or
// returns ctx.Err() when ctx ends first. The pull loop calls it before each pull.
func (d *Deps) Wait(ctx context.Context) error {
	for {
		d.mu.Lock()
		ok := d.allUpLocked()
		ch := d.changed
		d.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Report tells the watcher that a job failed; a non-nil err makes it probe at once (at most every
// MinReprobe), so an outage stops intake after one failed job instead of after an interval's worth.
func (d *Deps) Report(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	select {
	case d.kick <- struct{}{}:
	default: // a probe is already asked for
	}
}

// DownNow reports whether a dependency is down, probing at once unless one is known to be down
// already. The worker asks it when a job failed for a transient cause, to hold that job through an
// outage instead of spending its deliveries on it; a recent "up" is no evidence then (the job has just
// met the outage before any probe did), so it is probed again.
func (d *Deps) DownNow(ctx context.Context) bool {
	d.mu.Lock()
	down := !d.allUpLocked()
	d.mu.Unlock()
	if down {
		return true
	}
	d.probeAll(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.allUpLocked()
}

// Down names the dependencies that are down with their errors, sorted; empty when all are up.
func (d *Deps) Down() []DepCheck {
	var out []DepCheck
	for _, c := range d.Checks() {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Checks returns every dependency's last probe result, sorted by name.
func (d *Deps) Checks() []DepCheck {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]DepCheck, 0, len(d.state))
	for _, c := range d.state {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Err is nil when every dependency is up, else one error naming those that are down.
func (d *Deps) Err() error {
	down := d.Down()
	if len(down) == 0 {
		return nil
	}
	parts := make([]string, len(down))
	for i, c := range down {
		parts[i] = c.Name + ": " + c.Error
	}
	return fmt.Errorf("dependencies down: %s", strings.Join(parts, "; "))
}

func (d *Deps) run(ctx context.Context) {
	defer close(d.done)
	last := time.Now() // Start has just probed
	for {
		wait := d.cfg.Interval
		d.mu.Lock()
		if !d.allUpLocked() {
			wait = d.cfg.DownInterval
		}
		d.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-d.kick:
			t.Stop()
			if since := time.Since(last); since < d.cfg.MinReprobe {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d.cfg.MinReprobe - since):
				}
			}
		}
		last = time.Now()
		d.probeAll(ctx)
	}
}

// probeAll runs every probe concurrently (one slow dependency does not delay the others' verdicts)
// and records the results.
func (d *Deps) probeAll(ctx context.Context) {
	errs := make([]error, len(d.probes))
	var wg sync.WaitGroup
	for i, p := range d.probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
			defer cancel()
			errs[i] = p.Check(pctx)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // stopping: a probe cut short says nothing about the dependency
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	changed := false
	for i, p := range d.probes {
		prev := d.state[p.Name]
		now := DepCheck{Name: p.Name, OK: errs[i] == nil, Since: prev.Since}
		if errs[i] != nil {
			now.Error = errs[i].Error()
		}
		if now.OK != prev.OK {
			now.Since = time.Now()
			changed = true
			if now.OK {
				d.log.Info().Str("dependency", p.Name).Dur("down_for", now.Since.Sub(prev.Since)).Msg("dependency is back")
			} else {
				d.log.Warn().Str("dependency", p.Name).Err(errs[i]).Msg("dependency is down; not taking work until it is back")
			}
		}
		d.state[p.Name] = now
	}
	if changed {
		close(d.changed)
		d.changed = make(chan struct{})
		if d.allUpLocked() {
			d.log.Info().Msg("all dependencies are up; taking work again")
		}
	}
}

func (d *Deps) allUpLocked() bool {
	for _, c := range d.state {
		if !c.OK {
			return false
		}
	}
	return true
}

// watchDeps builds the watcher of what jobs need — clamd, the object store, scratch space — and starts
// it; Close stops it. Wire it as the pull loop's admission (natsjs.Admission) and let readiness read
// its state.
func (a *App) watchDeps(ctx context.Context, cfg DepsConfig) (*Deps, error) {
	d, err := NewDeps(cfg, []Probe{
		{Name: "clamd", Check: a.scanner.Ping},
		{Name: "object_store", Check: func(ctx context.Context) error { return checkStore(ctx, a.cfg, a.store) }},
		{Name: "scratch_disk", Check: func(context.Context) error { return checkScratch(a.cfg) }},
	}, a.log)
	if err != nil {
		return nil, fmt.Errorf("creating dependency watcher: %w", err)
	}
	d.Start(ctx)
	a.closers = append(a.closers, d.Close)
	return d, nil
}

// reportingObserver is the metrics observer that also tells the watcher when a stage that depends on
// clamd, the store or scratch space failed, so intake stops after one failed job.
type reportingObserver struct {
	*metrics
	deps *Deps
}

func (o reportingObserver) StageDone(kind pipeline.MediaKind, stage string, d time.Duration, err error) {
	o.metrics.StageDone(kind, stage, d, err)
	switch stage {
	case "downloading", "scanning", "uploading", "triaging":
		o.deps.Report(err)
	}
}
