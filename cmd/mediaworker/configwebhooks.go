package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/webhooks"
)

// The webhooks section: the simple case's one endpoint from flags (--webhook-url, --webhook-secret, …),
// and in the file a list of endpoints under webhooks.endpoints:
//
//	webhooks:
//	  retry_schedule: 5s,5m,30m,2h,5h,10h,10h
//	  endpoints:
//	    - name: api
//	      url: https://api.example/hooks/media
//	      secrets: [whsec_…]
//	      events: [response, virus]
//	      buckets: [media]
//
// Each endpoint field is checked where it is written, so a mistake is reported at its own line.

// webhooksSection is the file's section of webhook settings; webhookEndpointsKey its list of endpoints
// (read by decodeWebhookEndpoints, not a flag).
const (
	webhooksSection     = "webhooks"
	webhookEndpointsKey = "endpoints"
)

// endpointKeys are an endpoint's fields in the file.
var endpointKeys = []string{"name", "url", "events", "recipes", "buckets", "secrets", "ed25519_key", "timeout", "allow_private", "concurrency"}

// urlFlag is an endpoint URL that shows itself without its query or credentials (webhooks.Redact):
// `config` and the usage print flags through String, and a receiver's URL often carries a token.
type urlFlag string

func (u *urlFlag) String() string {
	if u == nil || *u == "" {
		return ""
	}
	return webhooks.Redact(string(*u))
}
func (u *urlFlag) Set(s string) error { *u = urlFlag(s); return nil }

// listFlag is a comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	*l = nil
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// durationsFlag is a comma-separated list of durations.
type durationsFlag []time.Duration

func (l *durationsFlag) String() string {
	s := make([]string, len(*l))
	for i, d := range *l {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

func (l *durationsFlag) Set(s string) error {
	var out []time.Duration
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 5s or 30m", v)
		}
		out = append(out, d)
	}
	*l = out
	return nil
}

// applyWebhooks puts the file's webhook endpoints into cfg, or prints what is wrong with them.
func applyWebhooks(c *command, cfg *app.Config, stderr io.Writer) bool {
	if c.file == nil || c.file.webhookEndpoints == nil {
		return true
	}
	eps, errs := c.file.decodeWebhookEndpoints()
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintf(stderr, "mediaworker %s: %v\n", c.name, e)
		}
		return false
	}
	cfg.Webhooks.Endpoints = eps
	return true
}

// decodeWebhookEndpoints reads webhooks.endpoints.
func (f *configFile) decodeWebhookEndpoints() ([]webhooks.Endpoint, []error) {
	n := f.webhookEndpoints
	at := webhooksSection + "." + webhookEndpointsKey
	if n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, []error{f.errAt(n, at, "must be a list of endpoints, got %s", kindName(n))}
	}
	var out []webhooks.Endpoint
	var errs []error
	for i, item := range n.Content {
		dotted := fmt.Sprintf("%s[%d]", at, i)
		if item.Kind != yaml.MappingNode {
			errs = append(errs, f.errAt(item, dotted, "must be a mapping of %s, got %s", strings.Join(endpointKeys, ", "), kindName(item)))
			continue
		}
		e, eerrs := f.decodeEndpoint(dotted, item)
		if len(eerrs) > 0 {
			errs = append(errs, eerrs...)
			continue
		}
		if err := e.Validate(); err != nil {
			for _, line := range errorLines(err) {
				errs = append(errs, f.errAt(item, dotted, "%s", line))
			}
			continue
		}
		out = append(out, e)
	}
	return out, errs
}

func (f *configFile) decodeEndpoint(dotted string, m *yaml.Node) (webhooks.Endpoint, []error) {
	var e webhooks.Endpoint
	var errs []error
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		key := dotted + "." + kn.Value
		if seen[kn.Value] {
			errs = append(errs, f.errAt(kn, key, "appears twice"))
			continue
		}
		seen[kn.Value] = true
		var problem string
		switch kn.Value {
		case "name":
			e.Name, problem = yamlString(vn)
		case "url":
			e.URL, problem = yamlString(vn)
		case "ed25519_key":
			e.Ed25519Key, problem = yamlString(vn)
		case "events":
			e.Events, problem = yamlStrings(vn)
		case "recipes":
			e.Recipes, problem = yamlStrings(vn)
		case "buckets":
			e.Buckets, problem = yamlStrings(vn)
		case "secrets":
			e.Secrets, problem = yamlStrings(vn)
		case "timeout":
			var s string
			if s, problem = yamlString(vn); problem == "" {
				if e.Timeout, problem = parseDurationText(s); problem != "" && vn.Tag != "!!str" {
					problem = "must be a duration with its unit such as 10s, got " + describeScalar(vn)
				}
			}
		case "allow_private":
			if vn.Kind != yaml.ScalarNode || vn.Tag != "!!bool" {
				problem = "must be true or false, got " + kindName(vn)
			} else {
				e.AllowPrivate = vn.Value == "true"
			}
		case "concurrency":
			if vn.Kind != yaml.ScalarNode || vn.Tag != "!!int" {
				problem = "must be a whole number, got " + kindName(vn)
			} else {
				e.Concurrency, _ = strconv.Atoi(vn.Value)
			}
		default:
			errs = append(errs, f.errAt(kn, key, "%s", unknownKey("key", kn.Value, endpointKeys)))
			continue
		}
		if problem != "" {
			errs = append(errs, f.errAt(vn, key, "%s", problem))
		}
	}
	return e, errs
}

func yamlString(n *yaml.Node) (string, string) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return "", "must be text, got " + kindName(n)
	}
	return n.Value, ""
}

// yamlStrings reads a list of text, or one text as a list of one.
func yamlStrings(n *yaml.Node) ([]string, string) {
	if n.Kind == yaml.ScalarNode {
		s, p := yamlString(n)
		return []string{s}, p
	}
	if n.Kind != yaml.SequenceNode {
		return nil, "must be a list of text, got " + kindName(n)
	}
	out := make([]string, 0, len(n.Content))
	for _, c := range n.Content {
		s, p := yamlString(c)
		if p != "" {
			return nil, "each entry " + p
		}
		out = append(out, s)
	}
	return out, ""
}

func parseDurationText(s string) (time.Duration, string) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Sprintf("must be a duration with its unit such as 10s, got %q", s)
	}
	return d, ""
}
