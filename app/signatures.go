package app

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/scanner"
)

// signatureCacheFor is how long one VERSION answer is reused: readiness probes, metric scrapes and the
// console all ask, and signatures change at most a few times a day.
const signatureCacheFor = 30 * time.Second

// signatureWatch knows how fresh clamd's signature database is. A clamd with month-old signatures still
// answers PING, so readiness asks this too.
type signatureWatch struct {
	scanner *scanner.Scanner
	maxAge  time.Duration // 0: never judged

	mu  sync.Mutex
	sig scanner.Signatures
	err error
	at  time.Time
}

func newSignatureWatch(s *scanner.Scanner, maxAge time.Duration) *signatureWatch {
	return &signatureWatch{scanner: s, maxAge: maxAge}
}

// get returns clamd's signatures, asking clamd at most once per signatureCacheFor.
func (w *signatureWatch) get(ctx context.Context) (scanner.Signatures, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.at.IsZero() && time.Since(w.at) < signatureCacheFor {
		return w.sig, w.err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	w.sig, w.err = w.scanner.Signatures(ctx)
	w.at = time.Now()
	return w.sig, w.err
}

// check is the readiness verdict: stale official signatures fail it; a dev database passes (it has no
// date to judge, and the console and /health flag it as development-only).
func (w *signatureWatch) check(ctx context.Context) error {
	sig, err := w.get(ctx)
	if err != nil {
		return fmt.Errorf("reading clamd's signature version: %w", err)
	}
	if sig.Dev || w.maxAge <= 0 {
		return nil
	}
	if age := sig.Age(time.Now()); age > w.maxAge {
		return fmt.Errorf("signatures %d are %s old (built %s), over the maximum age of %s (clamd.max_signature_age): is freshclam running?",
			sig.Version, roundAge(age), sig.Date.Format(time.RFC3339), w.maxAge)
	}
	return nil
}

// ageSeconds is the metric's value: NaN while unknown (clamd not answering) or for a dev database, so an
// alert on "> limit" never fires on a guess.
func (w *signatureWatch) ageSeconds() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sig, err := w.get(ctx)
	if err != nil || sig.Dev {
		return math.NaN()
	}
	return sig.Age(time.Now()).Seconds()
}

// signatureHealth is the "clamd" object of /health.
type signatureHealth struct {
	Engine              string     `json:"engine,omitempty"`
	SignatureVersion    uint64     `json:"signatureVersion,omitempty"`
	SignatureDate       *time.Time `json:"signatureDate,omitempty"`
	SignatureAgeSeconds int64      `json:"signatureAgeSeconds,omitempty"`
	MaxSignatureAge     string     `json:"maxSignatureAge"`
	DevDatabase         bool       `json:"devDatabase,omitempty"`
	Stale               bool       `json:"stale,omitempty"`
	Error               string     `json:"error,omitempty"`
}

func (w *signatureWatch) health(ctx context.Context) signatureHealth {
	h := signatureHealth{MaxSignatureAge: w.maxAge.String()}
	sig, err := w.get(ctx)
	if err != nil {
		h.Error = err.Error()
		return h
	}
	h.Engine, h.DevDatabase = sig.Engine, sig.Dev
	if !sig.Dev {
		d := sig.Date
		age := sig.Age(time.Now())
		h.SignatureVersion, h.SignatureDate, h.SignatureAgeSeconds = sig.Version, &d, int64(age.Seconds())
		h.Stale = w.maxAge > 0 && age > w.maxAge
	}
	return h
}

// roundAge shows an age as a person reads it: "3d4h", "5h12m".
func roundAge(d time.Duration) string {
	if d >= 24*time.Hour {
		days := int(d / (24 * time.Hour))
		return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
	}
	return d.Round(time.Minute).String()
}
