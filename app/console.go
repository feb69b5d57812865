package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/console"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/nats-io/nats.go/jetstream"
)

// operatorTokenSetting is the setting that holds the operator token (Config.ScanAPI.Token), as operators
// edit it: its config-file key. The console and the scan API share the token.
const operatorTokenSetting = "http.scan_api_token"

// deadLettersListed is how many of the newest dead letters the console lists (and counts per stream).
const deadLettersListed = 20

// consoleParts returns the console's state, creating it on first use: New wraps the pipeline with it and
// the HTTP server serves it, in whichever order they come.
func (a *App) consoleParts() *consoleState {
	if a.console == nil {
		a.console = newConsoleState(a.cfg.Streams, a.log)
	}
	return a.console
}

// consoleHandler is the console at "/". It starts following the responses stream; Close stops that.
// wrong is the budget of wrong tokens it shares with the scan API.
func (a *App) consoleHandler(wrong *throttle) http.Handler {
	st := a.consoleParts()
	h, err := console.New(&consoleSource{a: a, st: st}, console.Config{
		Token: a.cfg.ScanAPI.Token,
		// The scan API's rule: a token when one is set; without one, only on loopback (and then only
		// for requests that name a loopback host: see console/hosts.go).
		Open:         a.cfg.ScanAPI.Token == "" && isLoopback(a.cfg.HTTPAddr),
		TokenSetting: operatorTokenSetting,
		Limiter:      wrong,
	})
	if err != nil {
		a.log.Error().Err(err).Msg("console unavailable")
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "console unavailable: "+err.Error(), http.StatusInternalServerError)
		})
	}
	st.start(a.js)
	a.closers = append(a.closers, func() { st.stop() })
	return h
}

// consoleSource answers the console from the app's parts.
type consoleSource struct {
	a  *App
	st *consoleState

	// The newest dead letters as last read, and the stream state they were read at: the list is read
	// again (two requests per entry) only when the stream has changed.
	deadMu    sync.Mutex
	deadState jetstream.StreamState
	deadList  []console.DeadLetter
}

func (s *consoleSource) dlq() *natsjs.DLQ { return natsjs.NewDLQ(s.a.js, s.a.cfg.Streams) }

// Snapshot reads every part at once; each read has the request's deadline, and a part that does not
// answer shows up red with its error instead of holding up the page.
func (s *consoleSource) Snapshot(ctx context.Context) console.Snapshot {
	a := s.a
	snap := console.Snapshot{InFlight: s.st.inFlight()}
	if a.deps != nil {
		// A job handed back waits for what is down: the worker holds it, or pulls nothing, until then.
		if down := a.deps.Down(); len(down) > 0 {
			names := make([]string, len(down))
			for i, d := range down {
				names[i] = strings.ReplaceAll(d.Name, "_", " ")
			}
			for i := range snap.InFlight {
				if snap.InFlight[i].State != "" {
					snap.InFlight[i].State = "waiting for " + strings.Join(names, ", ")
				}
			}
		}
	}
	snap.Recent, snap.Throughput = s.st.outcomes()
	snap.Instance, _ = os.Hostname()

	// A part that does not answer within 3 s shows up red instead of holding the page longer.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var deps [4]console.Dependency // nats, clamd, object store, scratch: fixed order on the page
	var queues []console.Queue
	var dead []console.DeadLetter
	var deadCount int
	wg.Go(func() { deps[0] = s.natsDep() })
	wg.Go(func() { deps[1] = s.clamdDep(ctx) })
	wg.Go(func() { deps[2] = s.storeDep(ctx) })
	wg.Go(func() { deps[3] = s.scratchDep() })
	wg.Go(func() { queues = s.queues(ctx) })
	wg.Go(func() { dead, deadCount = s.deadLetters(ctx) })
	wg.Wait()
	s.addRescues(queues)

	// Each dead letter counts on the lane that gave up on it; one without Mw-Consumer (written before
	// the header existed) on triage, which every request passes.
	for i := range queues {
		for _, d := range dead {
			consumer := d.Consumer
			if consumer == "" {
				consumer = a.cfg.Streams.Durable
			}
			if d.Stream == queues[i].Stream && consumer == queues[i].Consumer {
				queues[i].DeadLetters++
			}
		}
	}
	snap.Dependencies = append(snap.Dependencies, deps[0])
	for _, q := range queues { // each lane's consumer is a dependency of its own
		d := console.Dependency{Name: "consumer " + q.Consumer, Detail: "on stream " + q.Stream, State: console.OK}
		if q.Error != "" {
			d.State, d.Reason = console.Fail, q.Error
		}
		snap.Dependencies = append(snap.Dependencies, d)
	}
	if len(queues) == 0 {
		snap.Dependencies = append(snap.Dependencies, console.Dependency{Name: "consumer", State: console.Fail,
			Reason: "no consumer on the request streams: start with streams.provision on, or run `mediaworker streams apply`"})
	}
	snap.Dependencies = append(snap.Dependencies, deps[1:]...)
	snap.Dependencies = append(snap.Dependencies, webhookDeps(a.webhooks)...)
	snap.Queues, snap.RecentDead, snap.DeadLetters = queues, dead, deadCount

	if a.worker != nil {
		for _, l := range a.worker.Slots() {
			snap.Slots = append(snap.Slots, console.Slots{Kind: l.Name, Active: l.Busy(), Max: l.Size})
		}
	}
	if a.memory != nil {
		// Every lane's budget together: what this instance's transforms hold, of what it allows. The
		// peak is each lane's own, added (an upper bound: they need not have peaked together).
		snap.Memory = &console.Memory{}
		for _, b := range a.memory {
			m := b.Stats()
			snap.Memory.InUse += m.InUse
			snap.Memory.Budget += m.Size
			snap.Memory.Peak += m.Peak
			snap.Memory.Waiting += m.Waiting
		}
	}
	return snap
}

func (s *consoleSource) natsDep() console.Dependency {
	a := s.a
	d := console.Dependency{Name: "nats", State: console.OK}
	if a.embedded != nil {
		d.Detail = fmt.Sprintf("embedded JetStream, clients on %s, data in %s", a.cfg.NATS.Embedded.Listen, a.cfg.NATS.Embedded.DataDir)
	} else {
		d.Detail = "servers: " + strings.Join(redactedServers(a.nc.Servers()), ", ")
		if u := a.nc.ConnectedUrlRedacted(); u != "" {
			d.Detail += " (connected to " + u + ")"
		}
	}
	if !a.nc.IsConnected() {
		d.State, d.Reason = console.Fail, "not connected ("+a.nc.Status().String()+"): jobs wait until NATS is back"
	}
	return d
}

// redactedServers drops credentials from server URLs before they reach the page.
func redactedServers(urls []string) []string {
	out := make([]string, 0, len(urls))
	for _, u := range urls {
		if at := strings.LastIndex(u, "@"); at >= 0 {
			if i := strings.Index(u, "://"); i >= 0 && i < at {
				u = u[:i+3] + "[REDACTED]" + u[at:]
			}
		}
		out = append(out, u)
	}
	return out
}

func (s *consoleSource) clamdDep(ctx context.Context) console.Dependency {
	a := s.a
	d := console.Dependency{Name: "clamd", Detail: a.cfg.Scanner.Addr, State: console.OK}
	if err := a.scanner.Ping(ctx); err != nil {
		d.State, d.Reason = console.Fail, err.Error()+": jobs wait until it answers"
		return d
	}
	sig, err := a.sigs.get(ctx)
	if err != nil {
		d.State, d.Reason = console.Warn, "answers PING, but its version is unreadable: "+err.Error()
		return d
	}
	d.Detail = describeSignatures(sig) + " at " + a.cfg.Scanner.Addr
	switch err := a.sigs.check(ctx); {
	case sig.Dev:
		d.State, d.Reason = console.Warn, "development signature database only: it detects the EICAR test file and nothing else. Run freshclam for real signatures."
	case err != nil:
		d.State, d.Reason = console.Fail, err.Error()
	}
	return d
}

func describeSignatures(sig scanner.Signatures) string {
	if sig.Dev {
		return "ClamAV " + sig.Engine + ", dev signatures (no official database)"
	}
	return fmt.Sprintf("ClamAV %s, signatures %d of %s (%s old)", sig.Engine, sig.Version,
		sig.Date.Format("2006-01-02 15:04"), roundAge(sig.Age(time.Now())))
}

func (s *consoleSource) storeDep(ctx context.Context) console.Dependency {
	a := s.a
	d := console.Dependency{Name: "object store", State: console.OK, Detail: "NATS object store"}
	if a.cfg.Storage == StorageS3 {
		d.Detail = "S3 at " + a.cfg.S3.Endpoint
	}
	if a.store == nil {
		d.State, d.Reason = console.Fail, "not opened yet"
		return d
	}
	if err := a.store.Ping(ctx); err != nil {
		d.State, d.Reason = console.Fail, err.Error()+": jobs wait until it answers"
	}
	return d
}

func (s *consoleSource) scratchDep() console.Dependency {
	p := s.a.cfg.Pipeline
	d := console.Dependency{Name: "scratch space", State: console.OK}
	free, err := pipeline.FreeBytes(p.TmpDir)
	if err != nil {
		d.State, d.Reason = console.Fail, err.Error()
		return d
	}
	d.Detail = fmt.Sprintf("%s free in %s (floor %s)", objstore.FormatBytes(free), p.TmpDir, objstore.FormatBytes(p.MinFreeBytes))
	switch {
	case free < p.MinFreeBytes:
		d.State, d.Reason = console.Fail, "below the free space to keep (jobs.scratch_min_free): jobs wait for space"
	case free < 2*p.MinFreeBytes:
		d.State, d.Reason = console.Warn, "less than twice the free space to keep (jobs.scratch_min_free) left"
	}
	return d
}

// queues lists the consumers of the app's work streams (the request stream today; each lane's stream
// when there are lanes), whatever their names: the console shows what NATS has, not what it expects.
func (s *consoleSource) queues(ctx context.Context) []console.Queue {
	cfg := s.a.cfg.Streams
	if !s.a.nc.IsConnected() { // asking would only wait for the deadline
		return []console.Queue{{Stream: cfg.RequestsStream(), Consumer: cfg.Durable, Error: "NATS is not connected"}}
	}
	prefix := strings.TrimSuffix(cfg.RequestsStream(), "REQUESTS")
	var names []string
	lister := s.a.js.StreamNames(ctx)
	for name := range lister.Name() {
		// The advisories stream is the worker's own bookkeeping (max-deliveries notices), not a queue
		// of uploads: listing its consumer beside the lanes would read as a stuck queue.
		if strings.HasPrefix(name, prefix) && name != cfg.ResponsesStream() && name != cfg.DLQStream() && name != cfg.AdvisoryCapture().Stream() {
			names = append(names, name)
		}
	}
	if err := lister.Err(); err != nil && len(names) == 0 {
		return []console.Queue{{Stream: cfg.RequestsStream(), Consumer: cfg.Durable, Error: "listing streams: " + err.Error()}}
	}
	slices.Sort(names)
	var out []console.Queue
	for _, name := range names {
		stream, err := s.a.js.Stream(ctx, name)
		if err != nil {
			out = append(out, console.Queue{Stream: name, Error: "opening stream: " + err.Error()})
			continue
		}
		infos := stream.ListConsumers(ctx)
		for ci := range infos.Info() {
			out = append(out, queueOf(name, ci))
		}
		if err := infos.Err(); err != nil {
			out = append(out, console.Queue{Stream: name, Error: "listing consumers: " + err.Error()})
		}
	}
	return out
}

// addRescues puts this instance's rescues of stranded messages (metrics.Rescued, counted since start)
// on the rows of the consumers that stranded them: triage's for lane "", each lane's own otherwise.
func (s *consoleSource) addRescues(queues []console.Queue) {
	if s.a.metrics == nil {
		return
	}
	cfg := s.a.cfg.Streams
	for lane, r := range s.a.metrics.rescues() {
		consumer := cfg.Durable
		if lane != "" {
			consumer = cfg.Lane(lane).Durable()
		}
		for i := range queues {
			if q := &queues[i]; q.Stream == cfg.RequestsStream() && q.Consumer == consumer {
				q.Rescued, q.LastRescue, q.LastRescueAction = r.count, r.last, r.action
			}
		}
	}
}

func queueOf(stream string, ci *jetstream.ConsumerInfo) console.Queue {
	return console.Queue{Stream: stream, Consumer: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending,
		Redelivered: ci.NumRedelivered, Waiting: ci.NumWaiting}
}

// deadLetters returns the newest entries of the dead-letter stream and how many it holds.
func (s *consoleSource) deadLetters(ctx context.Context) ([]console.DeadLetter, int) {
	if !s.a.nc.IsConnected() {
		return nil, 0
	}
	stream, err := s.a.js.Stream(ctx, s.a.cfg.Streams.DLQStream())
	if err != nil {
		return nil, 0
	}
	info, err := stream.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		return nil, 0
	}
	s.deadMu.Lock()
	defer s.deadMu.Unlock()
	st := info.State
	if st.Msgs == s.deadState.Msgs && st.FirstSeq == s.deadState.FirstSeq && st.LastSeq == s.deadState.LastSeq && s.deadList != nil {
		return slices.Clone(s.deadList), int(st.Msgs)
	}
	dlq := s.dlq()
	var out []console.DeadLetter
	// Replayed and purged entries leave gaps: look at a bounded number of sequences.
	for seq, tries := info.State.LastSeq, 0; seq >= info.State.FirstSeq && seq > 0 && len(out) < deadLettersListed && tries < 5*deadLettersListed; seq, tries = seq-1, tries+1 {
		dl, err := dlq.Get(ctx, seq)
		if err != nil {
			continue
		}
		out = append(out, deadLetterOf(dl))
	}
	if ctx.Err() == nil { // a list cut short by the deadline is not worth keeping
		s.deadState, s.deadList = st, out
	}
	return slices.Clone(out), int(st.Msgs)
}

func deadLetterOf(dl natsjs.DeadLetter) console.DeadLetter {
	return console.DeadLetter{Seq: dl.Seq, Time: dl.Time, MediaID: dl.MediaID, Reason: dl.Reason, LastError: dl.LastError,
		Deliveries: dl.Deliveries, Stream: dl.Header.Get(natsjs.HeaderStream), Consumer: dl.Header.Get(natsjs.HeaderConsumer),
		Payload: dl.PayloadText, Headers: dl.Header}
}

func (s *consoleSource) DeadLetter(ctx context.Context, seq uint64) (console.DeadLetter, error) {
	dl, err := s.dlq().Get(ctx, seq)
	if err != nil {
		return console.DeadLetter{}, consoleErr(err)
	}
	return deadLetterOf(dl), nil
}

func (s *consoleSource) Replay(ctx context.Context, seq uint64) error {
	err := s.dlq().Replay(ctx, seq)
	s.logAction("replayed", seq, err)
	return consoleErr(err)
}

func (s *consoleSource) Delete(ctx context.Context, seq uint64) error {
	err := s.dlq().Delete(ctx, seq)
	s.logAction("deleted", seq, err)
	return consoleErr(err)
}

func (s *consoleSource) Purge(ctx context.Context) (uint64, error) {
	n, err := s.dlq().Purge(ctx)
	if err != nil {
		s.a.log.Warn().Err(err).Msg("console: purging the dead-letter stream failed")
	} else {
		s.a.log.Info().Uint64("entries", n).Msg("console: dead-letter stream purged")
	}
	return n, err
}

// logAction leaves a trace of what an operator did from the console.
func (s *consoleSource) logAction(what string, seq uint64, err error) {
	if err != nil {
		s.a.log.Warn().Err(err).Uint64("seq", seq).Msg("console: dead letter not " + what)
		return
	}
	s.a.log.Info().Uint64("seq", seq).Msg("console: dead letter " + what)
}

func consoleErr(err error) error {
	if errors.Is(err, natsjs.ErrNoSuchEntry) {
		return fmt.Errorf("%w: %w", console.ErrNotFound, err)
	}
	return err
}
