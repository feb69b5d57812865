package app

import (
	"context"
	"fmt"

	"github.com/mediaworker/mediaworker/console"
	"github.com/mediaworker/mediaworker/webhooks"
	"github.com/prometheus/client_golang/prometheus"
)

// Webhooks: the app starts one delivery loop per configured endpoint (webhooks.Dispatcher), counts
// their deliveries in /metrics and shows each endpoint's state on the console.

// webhookStreams says where the webhooks read the answers and write dead letters.
func (c Config) webhookStreams() webhooks.Streams {
	return webhooks.Streams{App: c.Streams.App, Responses: c.Streams.ResponsesStream(), DLQStream: c.Streams.DLQStream(), Replicas: c.Streams.Replicas}
}

// startWebhooks starts the deliveries, when any endpoint is configured.
func (a *App) startWebhooks(ctx context.Context) error {
	if len(a.cfg.Webhooks.All()) == 0 {
		return nil
	}
	vec := newWebhookDeliveries()
	a.metrics.reg.MustRegister(vec)
	for _, e := range a.cfg.Webhooks.All() { // every endpoint's series from the start, at 0
		for _, r := range []string{webhooks.ResultDelivered, webhooks.ResultRetry, webhooks.ResultDeadLettered, webhooks.ResultDisabled} {
			vec.WithLabelValues(e.Name, r)
		}
	}
	d, err := webhooks.Start(ctx, a.js, a.cfg.webhookStreams(), a.cfg.Webhooks, webhookCounter{vec}, a.log)
	if err != nil {
		return fmt.Errorf("starting webhooks: %w", err)
	}
	a.webhooks = d
	a.closers = append(a.closers, d.Close)
	for _, e := range a.cfg.Webhooks.All() {
		a.log.Info().Str("endpoint", e.String()).Msg("delivering webhooks")
	}
	return nil
}

type webhookCounter struct{ vec *prometheus.CounterVec }

func (c webhookCounter) WebhookDelivery(endpoint, result string) {
	c.vec.WithLabelValues(endpoint, result).Inc()
}

// webhookDeps shows each endpoint as a dependency: healthy green, retrying amber, disabled red, with
// the last error.
func webhookDeps(d *webhooks.Dispatcher) []console.Dependency {
	if d == nil {
		return nil
	}
	var out []console.Dependency
	for _, s := range d.States() {
		dep := console.Dependency{Name: "webhook " + s.Name, Detail: s.URL, State: console.OK, Reason: s.Status}
		switch s.Status {
		case webhooks.StatusRetrying:
			dep.State, dep.Reason = console.Warn, "retrying: "+s.LastError
		case webhooks.StatusDisabled:
			dep.State, dep.Reason = console.Fail, "disabled (`mediaworker webhooks enable "+s.Name+"` resumes it)"
			if s.LastError != "" {
				dep.Reason += ": " + s.LastError
			}
		}
		if s.InRetry > 0 || s.Pending > 0 {
			dep.Detail += fmt.Sprintf(" · %d waiting, %d being retried", s.Pending, s.InRetry)
		}
		out = append(out, dep)
	}
	return out
}
