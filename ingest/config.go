// Package ingest turns the object store's own upload events into optimize requests, so an upload
// needs no API code to be answered: a presigned PUT into a watched bucket and prefix is enough. It
// reads S3 event notifications (AWS's {"Records":[…]} shape, as versitygw sends it, and MinIO's
// wrapper) from NATS subjects, or the JetStream object store's put notices, each through a durable
// consumer, maps every ObjectCreated record of a watched bucket and prefix to a request with a mediaId
// derived from the object's version, and publishes it on the request subject under
// Nats-Msg-Id: <mediaId>. docs/ingest.md tells the whole path.
//
// It knows contracts (the request), objstore (the store's URLs and variant marker) and NATS; never
// the pipeline: what it makes is an ordinary request, answered like any other.
package ingest

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mediaworker/mediaworker/contracts"
)

// Config is the ingest settings (the config file's ingest section).
type Config struct {
	// Enabled turns ingest on.
	Enabled bool
	// Routes says which uploads start a job, and with which recipe: comma-separated rules
	// bucket[/prefix][*suffix][=recipe], the first that matches winning ("media/uploads/",
	// "media/avatars/*.png=avatar"). No rule matches the quarantine bucket or the worker's outputs.
	Routes string
	// Subjects are the NATS subjects S3 event notifications arrive on (comma-separated; wildcards
	// allowed), for S3 storage. The worker keeps them in its own stream (EventsStream) so events sent
	// while it is down wait for it.
	Subjects string
	// Stream names an existing stream that holds the S3 events instead (the operator's): the worker
	// then provisions nothing for them and only adds its durable consumer.
	Stream string
	// URLTemplate makes a request's mediaUrl: {bucket}, {key} (path-escaped, slashes kept) and
	// {mediaId} are replaced. Empty: the object's URL in the store (on the embedded object store its
	// nats://objectstore/<bucket>/<key> name, as submit gives it: /objects serves variants only).
	URLTemplate string
}

// DefaultConfig is ingest off.
func DefaultConfig() Config { return Config{} }

// Validate checks the settings (when ingest is on).
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	if strings.TrimSpace(c.Routes) == "" {
		errs = append(errs, errors.New("routes (Config.Routes) is empty: name the bucket and prefix whose uploads start a job, e.g. media/uploads/"))
	} else if _, err := ParseRoutes(c.Routes); err != nil {
		errs = append(errs, fmt.Errorf("routes (Config.Routes): %w", err))
	}
	if c.URLTemplate != "" {
		if err := checkTemplate(c.URLTemplate); err != nil {
			errs = append(errs, fmt.Errorf("url template (Config.URLTemplate): %w", err))
		}
	}
	if c.Stream != "" && strings.ContainsAny(c.Stream, ".*> \t") {
		errs = append(errs, fmt.Errorf("stream (Config.Stream) %q is not a stream name (no '.', '*', '>' or spaces)", c.Stream))
	}
	for _, s := range splitList(c.Subjects) {
		if strings.ContainsAny(s, " \t") || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") {
			errs = append(errs, fmt.Errorf("subject (Config.Subjects) %q is not a NATS subject", s))
		}
	}
	return errors.Join(errs...)
}

// Route is one rule of Config.Routes.
type Route struct {
	Bucket, Prefix, Suffix string
	Recipe                 string // "" is the default recipe: the request names none
}

func (r Route) matches(bucket, key string) bool {
	return bucket == r.Bucket && strings.HasPrefix(key, r.Prefix) && strings.HasSuffix(key, r.Suffix) &&
		len(key) >= len(r.Prefix)+len(r.Suffix)
}

func (r Route) String() string {
	s := r.Bucket + "/" + r.Prefix
	if r.Suffix != "" {
		s += "*" + r.Suffix
	}
	if r.Recipe != "" {
		s += "=" + r.Recipe
	}
	return s
}

// ParseRoutes reads Config.Routes.
func ParseRoutes(s string) ([]Route, error) {
	var routes []Route
	var errs []error
	for _, rule := range splitList(s) {
		r, err := parseRoute(rule)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %q: %w", rule, err))
			continue
		}
		routes = append(routes, r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return routes, nil
}

func parseRoute(rule string) (Route, error) {
	var r Route
	rule, r.Recipe, _ = strings.Cut(rule, "=")
	rule, r.Suffix, _ = strings.Cut(rule, "*")
	r.Bucket, r.Prefix, _ = strings.Cut(rule, "/")
	if err := contracts.ValidateBucket(r.Bucket); err != nil {
		return Route{}, fmt.Errorf("bucket %q: %w (write bucket[/prefix][*suffix][=recipe])", r.Bucket, err)
	}
	if strings.HasPrefix(r.Prefix, "/") {
		return Route{}, errors.New("the prefix starts with '/': keys never do")
	}
	if strings.Contains(r.Suffix, "*") {
		return Route{}, errors.New("only one '*' (before the suffix) is allowed")
	}
	if r.Recipe != "" {
		if err := contracts.ValidateName(r.Recipe); err != nil {
			return Route{}, fmt.Errorf("recipe %w", err)
		}
		if r.Recipe == contracts.DefaultRecipe {
			r.Recipe = "" // the seed's outputs: the request names none
		}
	}
	return r, nil
}

// Buckets lists the routes' buckets, each once.
func Buckets(routes []Route) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range routes {
		if !seen[r.Bucket] {
			seen[r.Bucket] = true
			out = append(out, r.Bucket)
		}
	}
	return out
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
