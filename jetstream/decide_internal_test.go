package jetstream

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go/jetstream"
)

// plainWords tells errors as they are (the pipeline's words are not decide's business).
type plainWords struct{}

func (plainWords) Public(error) string     { return "a dependency was unavailable" }
func (plainWords) Detail(err error) string { return err.Error() }

// liveMsg stands for a pulled message: decide only asks whether there is one to hand back.
type liveMsg struct{ jetstream.Msg }

// decide is pure: what a user would see of a settlement (ack, nak and its delay, term and its reason,
// the events published in order, a DLQ copy) follows from the outcome, the delivery count and the
// facts gathered before (dependency down, drain, full lane), and from nothing else.
func TestDecideTable(t *testing.T) {
	cfg := DefaultConfig() // app "app", MaxDeliver 10
	r := rules{cfg: cfg, words: plainWords{}}
	last := uint64(cfg.MaxDeliver)
	const backoff = 7 * time.Second
	now := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	req := contracts.Request{MediaID: "m1", MediaURL: "https://store.example/u/m1.png", S3Key: "u/m1.png", S3Bucket: "b1"}
	transient := errors.New("dialing clamd: connection refused")

	success := job.Outcome{Kind: job.Success, MediaKind: job.Image, Response: job.NewResponse(req)}
	success.Response.Success = true
	failed := job.Outcome{Kind: job.Failed, MediaKind: job.Image, Err: errors.New("corrupt"), Response: job.FailureResponse(req, "the image is corrupt")}
	virus := &contracts.VirusEvent{MediaID: "m1", S3Key: "u/m1.png", S3Bucket: "b1", VirusName: "Eicar-Test-Signature", ActionTaken: "deleted"}
	infected := job.Outcome{Kind: job.Infected, MediaKind: job.Image, Virus: virus, Response: job.FailureResponse(req, "virus detected: Eicar-Test-Signature")}
	retry := job.Outcome{Kind: job.Retry, MediaKind: job.Image, Err: transient, Response: job.FailureResponse(req, "x")}
	route := job.Routed(job.Video, "video/mp4")
	orphan := job.Refused(contracts.Request{}, &contracts.ParseError{Reason: "not JSON"}) // nobody to answer: DLQ only

	subj := cfg.Subjects()
	type want struct {
		then    action
		delay   time.Duration
		hold    bool
		reason  string   // a term's reason (prefix)
		events  []string // subject[/Mw-Outcome] in publish order
		outbox  bool     // recorded before the first publish
		fail    time.Duration
		outcome job.Ending // what is reported
	}
	cases := []struct {
		name       string
		lane       job.Kind
		out        job.Outcome
		deliveries uint64
		f          facts
		want       want
	}{
		{"success answers and acks", job.Image, success, 1, facts{},
			want{then: actAck, events: []string{subj.Response + "/success"}, outbox: true, fail: backoff, outcome: job.Success}},
		{"success on the last delivery is the same", job.Image, success, last, facts{outage: true},
			want{then: actAck, events: []string{subj.Response + "/success"}, outbox: true, fail: backoff, outcome: job.Success}},
		{"failed answers and terms", job.Image, failed, 1, facts{},
			want{then: actTerm, reason: "the image is corrupt", events: []string{subj.Response + "/failed"}, outbox: true, fail: backoff, outcome: job.Failed}},
		{"infected: virus event, then the response", job.Image, infected, 2, facts{},
			want{then: actAck, events: []string{subj.Virus, subj.Response + "/virus"}, outbox: true, fail: backoff, outcome: job.Infected}},
		{"retry, dependencies up: nak after the backoff", job.Image, retry, 1, facts{},
			want{then: actNak, delay: backoff, outcome: job.Retry}},
		{"retry, a dependency down: held, then nak at once", job.Image, retry, 3, facts{outage: true},
			want{then: actNak, hold: true, outcome: job.Retry}},
		{"retry while draining: nak at once, not held", job.Image, retry, 3, facts{draining: true, outage: true},
			want{then: actNak, outcome: job.Retry}},
		{"retry on the last delivery: gave up, answered and dead-lettered", job.Image, retry, last, facts{},
			want{then: actTerm, reason: "moved to DLQ: max-deliveries", events: []string{subj.Response + "/gave-up", subj.DLQ}, outbox: true, outcome: job.GaveUp}},
		{"retry on the last delivery, a dependency down: gave up all the same", job.Image, retry, last, facts{outage: true},
			want{then: actTerm, reason: "moved to DLQ: max-deliveries", events: []string{subj.Response + "/gave-up", subj.DLQ}, outbox: true, outcome: job.GaveUp}},
		{"route: the lane copy, acked, no record", job.Triage, route, 1, facts{},
			want{then: actAck, events: []string{cfg.Lane(job.Video).WorkSubject()}, fail: backoff, outcome: job.Route}},
		{"route to a full lane: nak after the backoff", job.Triage, route, 1, facts{laneFull: true},
			want{then: actNak, delay: backoff, outcome: job.Route}},
		{"route to a full lane on the last delivery: past the cap", job.Triage, route, last, facts{laneFull: true},
			want{then: actAck, events: []string{cfg.Lane(job.Video).WorkSubject() + ".41"}, fail: backoff, outcome: job.Route}},
		{"unparseable without a mediaId: DLQ only", job.Triage, orphan, 1, facts{},
			want{then: actTerm, reason: "moved to DLQ: parse-error", events: []string{subj.DLQ}, outbox: true, fail: backoff, outcome: job.GaveUp}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := storedDelivery(c.lane, []byte(`{"mediaId":"m1"}`), nil, 41, now.Add(-time.Minute), c.deliveries, liveMsg{})
			d.req = req
			if c.out.Kind == job.GaveUp {
				d.req = contracts.Request{}
			}
			f := c.f
			f.backoff, f.now, f.maxPayload = backoff, now, 1<<20
			p, out := r.decide(d, f, c.out)
			p2, _ := r.decide(d, f, c.out)
			if p.then != p2.then || p.delay != p2.delay || len(p.events) != len(p2.events) {
				t.Fatalf("decide gave two answers for the same inputs: %+v and %+v", p, p2)
			}
			var got []string
			for _, ev := range p.events {
				s := ev.msg.Subject
				if o := ev.msg.Header.Get(HeaderOutcome); o != "" {
					s += "/" + o
				}
				got = append(got, s)
			}
			w := c.want
			if p.then != w.then || p.delay != w.delay || p.hold != w.hold || !strings.HasPrefix(p.reason, w.reason) ||
				strings.Join(got, " ") != strings.Join(w.events, " ") || (p.outbox != nil) != w.outbox ||
				p.failDelay != w.fail || out.Kind != w.outcome {
				t.Errorf("plan: then %d delay %s hold %v reason %q events %v outbox %v failDelay %s outcome %s\n"+
					"want: then %d delay %s hold %v reason %q events %v outbox %v failDelay %s outcome %s",
					p.then, p.delay, p.hold, p.reason, got, p.outbox != nil, p.failDelay, out.Kind,
					w.then, w.delay, w.hold, w.reason, w.events, w.outbox, w.fail, w.outcome)
			}
			for _, ev := range p.events {
				if ev.msg.Subject == subj.DLQ && ev.msg.Header.Get(HeaderDeadAt) != now.Format(time.RFC3339Nano) {
					t.Errorf("the dead letter is stamped %q, want the facts' time %s", ev.msg.Header.Get(HeaderDeadAt), now)
				}
			}
		})
	}
}

// An answer larger than the server takes becomes a short failure before anything is published; a
// dead letter is cut to fit. Both from the facts' limit alone.
func TestDecideFitsThePayloadLimit(t *testing.T) {
	cfg := DefaultConfig()
	r := rules{cfg: cfg, words: plainWords{}}
	req := contracts.Request{MediaID: "m1", MediaURL: "https://store.example/" + strings.Repeat("a", 40<<10), S3Key: "k"}
	out := job.Outcome{Kind: job.Success, MediaKind: job.Image, Response: job.NewResponse(req)}
	out.Response.Success = true
	d := storedDelivery(job.Image, []byte(strings.Repeat("x", 40<<10)), nil, 5, time.Now(), 1, liveMsg{})
	d.req = req
	f := facts{backoff: time.Second, now: time.Now(), maxPayload: 32 << 10}

	p, settled := r.decide(d, f, out)
	if !p.shrunk || settled.Kind != job.Failed || p.then != actTerm || len(p.events) != 1 {
		t.Fatalf("an answer over the limit: shrunk %v, outcome %s, then %d, %d events; want a short failure, termed", p.shrunk, settled.Kind, p.then, len(p.events))
	}
	var resp contracts.Response
	if err := json.Unmarshal(p.events[0].msg.Data, &resp); err != nil || resp.Success || resp.MediaID != "m1" || len(p.events[0].msg.Data)+headerAllowance > f.maxPayload {
		t.Fatalf("the short failure: %v %+v (%d bytes)", err, resp, len(p.events[0].msg.Data))
	}

	gaveUp := job.GaveUpAfter(req, job.Image, 10, errors.New("clamd down"), "a dependency was unavailable")
	gaveUp.Response = contracts.Response{} // nobody to answer: the dead letter alone
	p, _ = r.decide(d, f, gaveUp)
	if len(p.events) != 1 || !p.events[0].deadLetter {
		t.Fatalf("want the dead letter alone, got %d events", len(p.events))
	}
	dl := p.events[0].msg
	if len(dl.Data) != f.maxPayload-headerAllowance || dl.Header.Get(HeaderPayloadTruncated) != "40960" {
		t.Fatalf("dead letter: %d bytes, %s=%q; want cut to %d and the original length", len(dl.Data),
			HeaderPayloadTruncated, dl.Header.Get(HeaderPayloadTruncated), f.maxPayload-headerAllowance)
	}
}
