// Package webhooks delivers what the worker publishes on the responses stream (answers and virus
// events) to HTTP endpoints, signed as Standard Webhooks 1.0 asks. Each endpoint reads the stream
// through a durable JetStream consumer of its own: the consumer's acknowledgement is the delivery's
// record, so a restart or a crash neither drops nor repeats a delivery (beyond the one the spec's
// webhook-id lets a receiver drop), and a slow endpoint holds up only itself. The package depends on
// contracts and nats.go only; the app wires it (app/webhooks.go).
package webhooks

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
)

// Events an endpoint may ask for.
const (
	EventResponse = "response" // <app>.media.optimize.response: every answer
	EventVirus    = "virus"    // <app>.media.optimize.response.virus: virus events
	// EventProgress is a video's progress (<app>.media.optimize.progress.<mediaId>), only when asked
	// for: it is not kept in a stream, so it is delivered at most once, without retries (progress.go).
	EventProgress = "progress"
)

// Secret prefixes of the spec: a symmetric secret, an Ed25519 secret key and its public key.
const (
	secretPrefix     = "whsec_"
	ed25519KeyPrefix = "whsk_"
	ed25519PubPrefix = "whpk_"
)

// Secret length bounds of Standard Webhooks 1.0 ("Signature scheme: symmetric"): at least 24 bytes
// (192 bits) and at most 64.
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

// RecommendedMaxBody is the spec's recommended largest payload (20 kB). A larger answer is still sent
// whole (the body is the answer as published), but the delivery is logged and counted as oversize.
const RecommendedMaxBody = 20 * 1024

// DefaultSchedule is the spec's retry schedule after the first, immediate, attempt: 5 seconds, 5
// minutes, 30 minutes, 2 hours, 5 hours, 10 hours, 10 hours (eight attempts over about 28 hours).
func DefaultSchedule() []time.Duration {
	return []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}
}

// Config is the webhooks' part of the worker's settings.
type Config struct {
	// Schedule is the wait before each retry; len(Schedule)+1 attempts in all. Empty: DefaultSchedule.
	Schedule  []time.Duration
	Endpoints []Endpoint
	// Single is the simple case's endpoint (--webhook-url and its neighbours), delivered to when its
	// URL is set, beside Endpoints; its name is SingleName unless it has one.
	Single Endpoint
}

// SingleName names Config.Single when it names itself nothing.
const SingleName = "default"

// All returns the endpoints to deliver to: Endpoints, and Single when its URL is set.
func (c Config) All() []Endpoint {
	if c.Single.URL == "" {
		return c.Endpoints
	}
	one := c.Single
	if one.Name == "" {
		one.Name = SingleName
	}
	return append(append([]Endpoint(nil), c.Endpoints...), one)
}

// Endpoint is one receiver.
type Endpoint struct {
	Name string // names its consumer and its metrics: letters, digits, '_' and '-'
	URL  string // http or https
	// Events it receives (EventResponse, EventVirus, EventProgress); empty: answers and virus events.
	Events []string
	// Recipes and Buckets, when set, narrow the answers it receives to those of requests naming one of
	// these recipes (contracts.DefaultRecipe for a request naming none) and one of these buckets.
	Recipes, Buckets []string
	// Secrets sign each delivery (whsec_<base64>, 24–64 bytes); several while one is rotated out, each
	// giving the request a signature of its own.
	Secrets []string
	// Ed25519Key signs with the spec's asymmetric scheme (whsk_<base64 of the 64-byte private key or
	// its 32-byte seed>); with or instead of Secrets.
	Ed25519Key string
	Timeout    time.Duration // per request; 0: DefaultTimeout
	// AllowPrivate lets the endpoint be on loopback, private, CGNAT, link-local or ULA addresses.
	// Off, such an address is refused when the URL names it and at every connect (so a name that
	// resolves to one, now or later, is refused too).
	AllowPrivate bool
	// Concurrency is how many requests to this endpoint may be under way at once; 0: DefaultConcurrency.
	Concurrency int
}

// Endpoint defaults.
const (
	DefaultTimeout     = 15 * time.Second
	DefaultConcurrency = 4
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (c Config) schedule() []time.Duration {
	if len(c.Schedule) == 0 {
		return DefaultSchedule()
	}
	return c.Schedule
}

// Validate checks every endpoint and says which one and what to fix.
func (c Config) Validate() error {
	var errs []error
	for i, d := range c.Schedule {
		if d < 0 {
			errs = append(errs, fmt.Errorf("webhooks retry schedule step %d is %s: a wait must not be negative", i+1, d))
		}
	}
	seen := map[string]bool{}
	for i, e := range c.All() {
		if seen[e.Name] {
			errs = append(errs, fmt.Errorf("webhook endpoint %d: the name %q is used twice (each endpoint has its own consumer)", i+1, e.Name))
		}
		seen[e.Name] = true
		if err := e.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Validate checks one endpoint.
func (e Endpoint) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("webhook endpoint %q: "+format, append([]any{e.Name}, args...)...))
	}
	if !namePattern.MatchString(e.Name) {
		add("the name must be 1–64 letters, digits, '_' or '-'")
	}
	if err := e.checkURL(); err != nil {
		add("%v", err)
	}
	for _, ev := range e.Events {
		if ev != EventResponse && ev != EventVirus && ev != EventProgress {
			add("unknown event %q: events are %q, %q and %q", ev, EventResponse, EventVirus, EventProgress)
		}
	}
	if e.wantsProgress() && (len(e.Recipes) > 0 || len(e.Buckets) > 0) {
		add("progress events name no bucket or recipe, so an endpoint limited to buckets or recipes cannot receive them: give progress an endpoint of its own")
	}
	for _, r := range e.Recipes {
		if err := contracts.ValidateName(r); err != nil {
			add("recipe %q: %v", r, err)
		}
	}
	for _, b := range e.Buckets {
		if b == "" {
			add("an empty bucket name")
		}
	}
	if len(e.Secrets) == 0 && e.Ed25519Key == "" {
		add("no signing secret: set secrets (whsec_…) or an ed25519 key (whsk_…); `mediaworker webhooks secret` makes one")
	}
	for i, s := range e.Secrets {
		if _, err := decodeSecret(s); err != nil {
			add("secret %d: %v", i+1, err)
		}
	}
	if e.Ed25519Key != "" {
		if _, err := decodeEd25519(e.Ed25519Key); err != nil {
			add("ed25519 key: %v", err)
		}
	}
	if e.Timeout < 0 || e.Timeout > 5*time.Minute {
		add("timeout %s must be between 0 (the default, %s) and 5m", e.Timeout, DefaultTimeout)
	}
	if e.Concurrency < 0 || e.Concurrency > 256 {
		add("concurrency %d must be between 0 (the default, %d) and 256", e.Concurrency, DefaultConcurrency)
	}
	return errors.Join(errs...)
}

// checkURL refuses what is not an absolute http(s) URL, and a literal address the guard would refuse
// anyway (so the mistake is reported at start, not at the first delivery).
func (e Endpoint) checkURL() error {
	u, err := url.Parse(e.URL)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url %q must start with http:// or https://", Redact(e.URL))
	}
	if u.Hostname() == "" {
		return fmt.Errorf("url %q has no host", Redact(e.URL))
	}
	if u.User != nil {
		return fmt.Errorf("url %q carries credentials: receivers verify the signature instead", Redact(e.URL))
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && !e.AllowPrivate {
		if why := refused(ip); why != "" {
			return fmt.Errorf("url %q: %s; set allow_private for an endpoint on this network", Redact(e.URL), why)
		}
	}
	return nil
}

func (e Endpoint) timeout() time.Duration {
	if e.Timeout == 0 {
		return DefaultTimeout
	}
	return e.Timeout
}

func (e Endpoint) concurrency() int {
	if e.Concurrency == 0 {
		return DefaultConcurrency
	}
	return e.Concurrency
}

// wants reports whether the endpoint receives event (EventResponse or EventVirus).
func (e Endpoint) wants(event string) bool {
	if len(e.Events) == 0 {
		return event != EventProgress
	}
	for _, ev := range e.Events {
		if ev == event {
			return true
		}
	}
	return false
}

func (e Endpoint) wantsProgress() bool { return e.wants(EventProgress) }

// String shows the endpoint with its secrets masked, for `config` and logs.
func (e Endpoint) String() string {
	masked := make([]string, len(e.Secrets))
	for i := range e.Secrets {
		masked[i] = "****"
	}
	key := ""
	if e.Ed25519Key != "" {
		key = " ed25519_key=****"
	}
	return fmt.Sprintf("%s %s events=%v recipes=%v buckets=%v secrets=%v%s timeout=%s allow_private=%t",
		e.Name, Redact(e.URL), e.Events, e.Recipes, e.Buckets, masked, key, e.timeout(), e.AllowPrivate)
}

// Redact drops a URL's query and credentials, which may carry tokens, for logs and the console.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// decodeSecret reads a whsec_ secret and checks its length against the spec's bounds.
func decodeSecret(s string) ([]byte, error) {
	if !strings.HasPrefix(s, secretPrefix) {
		return nil, fmt.Errorf("must start with %q (base64 of %d–%d random bytes)", secretPrefix, MinSecretBytes, MaxSecretBytes)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, secretPrefix))
	if err != nil {
		return nil, fmt.Errorf("is not base64 after %q: %w", secretPrefix, err)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, fmt.Errorf("is %d bytes; Standard Webhooks asks for %d–%d", len(key), MinSecretBytes, MaxSecretBytes)
	}
	return key, nil
}

// decodeEd25519 reads a whsk_ key: the 64-byte private key or its 32-byte seed.
func decodeEd25519(s string) (ed25519.PrivateKey, error) {
	if !strings.HasPrefix(s, ed25519KeyPrefix) {
		return nil, fmt.Errorf("must start with %q (base64 of the 64-byte private key or its 32-byte seed)", ed25519KeyPrefix)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, ed25519KeyPrefix))
	if err != nil {
		return nil, fmt.Errorf("is not base64 after %q: %w", ed25519KeyPrefix, err)
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		k := ed25519.PrivateKey(raw)
		if !k.Public().(ed25519.PublicKey).Equal(ed25519.NewKeyFromSeed(k.Seed()).Public()) {
			return nil, errors.New("is not a valid Ed25519 private key (its public half does not match its seed)")
		}
		return k, nil
	}
	return nil, fmt.Errorf("is %d bytes; an Ed25519 key is %d (seed) or %d (private key)", len(raw), ed25519.SeedSize, ed25519.PrivateKeySize)
}

// PublicKey returns the whpk_ public key receivers verify an Ed25519-signed endpoint with.
func PublicKey(whsk string) (string, error) {
	k, err := decodeEd25519(whsk)
	if err != nil {
		return "", err
	}
	return ed25519PubPrefix + base64.StdEncoding.EncodeToString(k.Public().(ed25519.PublicKey)), nil
}
