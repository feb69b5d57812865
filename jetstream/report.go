package jetstream

import (
	"errors"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/job"
	"github.com/rs/zerolog"
)

// tally tells how messages were settled: a log line for each and the Observer's counts (metrics). A
// nil Observer counts nothing.
type tally struct {
	obs   Observer
	words job.Words // the private side of a failure, for its log line
}

func (t tally) settled(outcome string, kind job.Kind, d *delivery) {
	if t.obs != nil {
		t.obs.Settled(outcome, kind, d.deliveries)
	}
}

func (t tally) published(subject string, d time.Duration) {
	if t.obs != nil {
		t.obs.Published(subject, d)
	}
}

func (t tally) publishFailed(subject string) {
	if t.obs != nil {
		t.obs.PublishFailed(subject)
	}
}

func (t tally) rescued(lane job.Kind, action string) {
	if t.obs != nil {
		t.obs.Rescued(lane, action)
	}
}

// laneFull tells of a route its lane's cap refused, as decided again (settler.settle): handed back
// with a backoff, or on its last delivery routed past the cap.
func (t tally) laneFull(d *delivery, p plan, subject string, log zerolog.Logger) {
	if p.then == actNak {
		log.Warn().Str("subject", subject).Dur("retry_in", p.delay).Msg("the lane is full (Config.MaxQueued); handing the request back")
		t.settled("retry", "", d)
		return
	}
	for _, ev := range p.events {
		log.Warn().Str("subject", ev.msg.Subject).Msg("the lane is full (Config.MaxQueued) on the request's last delivery; routing it past the cap")
	}
}

// report logs and counts a settled outcome.
func (t tally) report(out job.Outcome, d *delivery, p plan, log zerolog.Logger) {
	switch {
	case out.Kind == job.Retry && p.hold:
		log.Info().Err(out.Err).Msg("held through a dependency outage; handed back for redelivery")
		t.settled("handed_back", out.MediaKind, d)
		return
	case out.Kind == job.Retry && p.delay == 0:
		log.Info().Msg("job stopped by shutdown; handed back for redelivery")
		t.settled("handed_back", out.MediaKind, d)
		return
	case out.Kind == job.Retry:
		log.Warn().Err(out.Err).Dur("retry_in", p.delay).Msg("job failed; will retry")
		t.settled("retry", out.MediaKind, d)
		return
	}
	switch out.Kind {
	case job.Success:
		log.Info().Int("variants", len(out.Response.Processed)).Msg("job succeeded")
		t.settled("success", out.MediaKind, d)
	case job.Infected:
		log.Warn().Str("virus", out.Virus.VirusName).Str("action", out.Virus.ActionTaken).Msg("virus detected")
		t.settled("infected", out.MediaKind, d)
	case job.Route:
		log.Debug().Str("to", string(out.MediaKind)).Str("mime", out.MIME).Msg("routed")
		t.settled("routed", out.MediaKind, d)
	case job.Failed:
		var pe *contracts.ParseError
		if errors.As(out.Err, &pe) {
			log.Info().Str("error", out.Response.Error).Msg("request refused")
			t.settled("invalid", "", d)
			return
		}
		ev := log.Info().Str("error", out.Response.Error)
		if detail := t.words.Detail(out.Err); detail != "" {
			ev = ev.Str("detail", detail) // ffmpeg's or libvips' words, kept out of the response
		}
		ev.Msg("job failed permanently")
		t.settled("failed", out.MediaKind, d)
	case job.GaveUp:
		log.Error().Err(out.Err).Str("reason", out.Reason).Msg("job gave up; request moved to the dead-letter stream")
		t.settled("dead_lettered", out.MediaKind, d)
	}
}
