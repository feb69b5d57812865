// Package console is the operator's page at the HTTP root: dependencies, queues, throughput, jobs in
// flight, recent outcomes and the dead-letter stream, at a glance and in a browser, for sites that run no
// Prometheus or Grafana.
//
// It is a view: everything it shows comes through the Source interface declared here, which the app
// implements from its parts, so this package imports nothing of the worker's. The HTML is rendered on
// the server (html/template); the CSS, a little JS and the templates are embedded, so there is no CDN
// and no build step. The page polls a fragment of itself every few seconds. A preview's placeholder is
// drawn on the server too, from the response's ThumbHash (thumbhash.go), and sent as a data: URL.
package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// State is a traffic light.
type State string

const (
	OK   State = "ok"   // green
	Warn State = "warn" // amber: works, but look at the reason
	Fail State = "fail" // red: jobs that need it wait
)

// Dependency is one thing the worker needs, with its state and why.
type Dependency struct {
	Name   string // "nats", "clamd", ...
	Detail string // what it is: "embedded, 127.0.0.1:4222", "ClamAV 1.4.6, signatures 27500 (Nov 20)"
	State  State
	Reason string // why it is not OK (or a note when it is)
}

// Queue is one consumer (a lane) of the worker's streams.
type Queue struct {
	Stream      string
	Consumer    string
	Pending     uint64 // not yet delivered
	AckPending  int    // delivered, not yet acknowledged: in flight
	Redelivered int    // delivered more than once and not yet acknowledged
	Waiting     int    // pull requests waiting (instances with a free slot)
	DeadLetters int    // dead letters this consumer gave up on (of those listed)
	Error       string // the consumer could not be read
	// Rescued counts this consumer's stranded messages (stored, but never to be delivered again: a
	// crash lost them from the consumer's state) that this instance found and settled since it started.
	Rescued          int
	LastRescue       time.Time // when the last of them was settled
	LastRescueAction string    // what was done with it: retried, gave_up, removed or finished
}

// Slots is one media kind's transform pool on this instance.
type Slots struct {
	Kind    string
	Active  int
	Max     int
	Waiting int
}

// Memory is this instance's memory budget (--max-memory): the bytes the jobs it admitted are
// expected to hold, of the budget, and the jobs waiting for memory to start their transform.
type Memory struct {
	InUse, Budget int64
	Peak          int64 // the most admitted at once since the start
	Waiting       int
}

// Job is one job this instance holds now.
type Job struct {
	MediaID  string
	File     string    // the upload's name (FileName of its s3Key)
	Kind     string    // "" until detected
	Started  time.Time // when this delivery started
	Progress float64   // 0–1; < 0 when the job reports none (images)
	// State is "" while the job runs. A job whose delivery failed for a transient cause stays listed
	// until its request is answered (by any instance), with why it waits: "retrying" while its
	// delivery is handed back for another, "waiting for clamd" while a dependency it needs is down
	// (the worker holds it, or pulls nothing, until it is back).
	State string
}

// Outcome is one settled request, as its response (and virus event) on the responses stream tell.
type Outcome struct {
	MediaID    string
	File       string // the upload's name (FileName of its s3Key); "" when the worker that answered is not this one
	Kind       string // image, video or "" when the response does not tell
	Result     string // one of the Result* constants
	Error      string
	Virus      string        // the virus name for infected uploads
	Action     string        // what was done with an infected upload
	Duration   time.Duration // 0 when unknown (settled by another instance or before a restart)
	Time       time.Time     // when the response was published
	PreviewURL string        // the low WebP of an image or a video's poster, from the response itself
	// The asset's facts from the response's metadata, as it carries them (the console checks them
	// before it shows them): the ThumbHash (standard base64) that the preview's placeholder is drawn
	// from, the dominant colour ("#rrggbb"), and whether the answer reused an earlier upload's variants.
	ThumbHash     string
	DominantColor string
	Reused        bool
}

// Results, as the chart and the table name them.
const (
	ResultSuccess  = "success"
	ResultFailed   = "failed"
	ResultInfected = "infected"
	ResultGaveUp   = "gave up"
)

// Results lists the results in the chart's stacking order.
var Results = []string{ResultSuccess, ResultFailed, ResultInfected, ResultGaveUp}

// DeadLetter is one entry of the dead-letter stream.
type DeadLetter struct {
	Seq        uint64
	Time       time.Time
	MediaID    string
	Reason     string
	LastError  string
	Deliveries int
	Stream     string // where the request came from
	Consumer   string // the consumer (triage or a lane) that gave up on it
	Payload    string
	Headers    map[string][]string
}

// Snapshot is everything the page shows, read at one moment.
type Snapshot struct {
	Instance     string // e.g. the host name
	Dependencies []Dependency
	Queues       []Queue
	Slots        []Slots
	Memory       *Memory      // nil: no budget to show
	DeadLetters  int          // entries in the dead-letter stream
	RecentDead   []DeadLetter // the newest few
	InFlight     []Job
	Recent       []Outcome // newest first
	Throughput   *Ring
}

// Source gives the console its data and carries out its actions. Every method gets a context bounded
// by the request and must not block past it.
type Source interface {
	Snapshot(ctx context.Context) Snapshot
	DeadLetter(ctx context.Context, seq uint64) (DeadLetter, error)
	Replay(ctx context.Context, seq uint64) error
	Delete(ctx context.Context, seq uint64) error
	Purge(ctx context.Context) (uint64, error)
}

// ErrNotFound is what Source returns for a dead letter that is not (or no longer) there.
var ErrNotFound = errors.New("no such dead letter")

// Config says who may use the console.
type Config struct {
	// Token is the operator token. When set, every page and action needs it: as "Authorization:
	// Bearer <token>", or once through the login form, which sets an HttpOnly, SameSite=Strict cookie.
	Token string
	// Open allows use without a token. Set it only when the listener is on loopback and Token is empty;
	// with neither, the console refuses everyone and says which setting to change. An open console
	// answers only requests that name a loopback host (see LoopbackHost).
	Open bool
	// TokenSetting names the setting that holds Token as operators edit it (e.g. a config-file key), for
	// the messages that tell an operator what to set.
	TokenSetting string
	// Limiter budgets wrong tokens per client; required with a Token.
	Limiter Limiter
	// Refresh is how often the page reloads its data; 0 means 3 s.
	Refresh time.Duration
}

// Limiter budgets wrong operator tokens per client. The app shares one between the console and the
// scan API, so guessing on either spends the same budget; the console only asks and reports.
type Limiter interface {
	// Check runs one token check for r's client: right reports whether the token r carries is the
	// operator's, and Check calls it at most once (a client over its budget may wait for its turn, and
	// is not checked at all when too many of its requests wait). ok means the token was right: a right
	// token always passes once it is checked. Otherwise retry is 0 for a wrong token within the budget
	// (answer 401), and for the rest how long the client's checks stay slowed (answer 429 with it as
	// Retry-After).
	Check(r *http.Request, right func() bool) (ok bool, retry time.Duration)
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Open && c.Token != "" {
		return fmt.Errorf("console: open (no token) and a token at once: leave %s empty for an open console on loopback", c.TokenSetting)
	}
	if c.Token != "" && c.Limiter == nil {
		return errors.New("console: a token needs a limiter for wrong guesses")
	}
	if c.Refresh < 0 {
		return fmt.Errorf("console: refresh must not be negative, got %s", c.Refresh)
	}
	return nil
}
