package webhooks

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Endpoint states, as the console shows them.
const (
	StatusHealthy  = "healthy"  // the last attempt was delivered (or none was made yet)
	StatusRetrying = "retrying" // the last attempt failed; deliveries are being retried
	StatusDisabled = "disabled" // it answered 410 Gone (or was paused): nothing is sent until enabled
)

// State is one endpoint's state on this instance.
type State struct {
	Name, URL   string // the URL without query or credentials
	Status      string
	LastError   string // the last failed attempt's error
	LastStatus  int    // the last attempt's HTTP status, 0 for none
	LastAttempt time.Time
	Pending     uint64 // answers not yet attempted (from the consumer, as last read)
	InRetry     int    // answers attempted and not yet delivered
}

func (r *runner) snapshot() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// note records an attempt.
func (r *runner) note(res result, status string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.LastStatus, r.st.LastAttempt = res.status, res.at
	if !res.ok() {
		r.st.LastError = res.describe()
	}
	if r.st.Status != StatusDisabled || status == StatusDisabled {
		r.st.Status = status
	}
}

// noteInfo takes what the consumer says: paused is disabled (by this instance, another, or an
// operator), and resumed is no longer.
func (r *runner) noteInfo(info *jetstream.ConsumerInfo) {
	if info == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.Pending, r.st.InRetry = info.NumPending, info.NumAckPending
	switch {
	case info.Paused:
		r.st.Status = StatusDisabled
	case r.st.Status == StatusDisabled:
		r.st.Status = StatusHealthy
	}
}
