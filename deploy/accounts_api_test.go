package deploy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// The API role of deploy/nats/accounts.conf (issue #24 item 7). A consumer moves its stream's messages
// onto whatever subject its creator names, and the server asks for no publish permission to do it; its
// permissions see only a request's subject, which names the consumer but not whether it pushes. So a
// role that may create consumers on the responses stream may copy responses into the DLQ (forged dead
// letters that `dlq ls` and the console show), the work queue, the key-value and object-store subjects.
// The API therefore creates no consumer; its durable is provisioned once by an operator.

// provisionAPIConsumer creates the API's durable as accounts.conf tells operators to: the nats CLI with
// the worker's credentials and deploy/nats/api-consumer.json.
func provisionAPIConsumer(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.NATSCLI(t), "consumer", "add", "APP_MEDIA_RESPONSES", "--config", "nats/api-consumer.json")
	cmd.Env = append(cleanEnv(), "NATS_URL="+url, "NATS_USER=worker", "NATS_PASSWORD="+rolePasswords["worker"],
		"XDG_CONFIG_HOME="+t.TempDir()) // no nats CLI context of the machine's user
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats consumer add APP_MEDIA_RESPONSES --config nats/api-consumer.json as worker: %v\n%s", err, out)
	}
}

// deniedRequest sends a request as user and waits for the server's permissions violation naming
// subject. An answer means the server let the request through, and fails the test with it.
func deniedRequest(t *testing.T, url, user, subject string, body []byte) {
	t.Helper()
	errs := make(chan error, 4)
	nc, err := nats.Connect(url, nats.UserInfo(user, rolePasswords[user]),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	inbox := nc.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		t.Fatal(err)
	}
	answered := make(chan *nats.Msg, 1)
	go func() {
		if m, err := replies.NextMsg(10 * time.Second); err == nil {
			answered <- m
		}
	}()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), subject) {
			t.Errorf("%s requesting %s: %v, want a permissions violation", user, subject, err)
		}
	case m := <-answered:
		t.Errorf("%s may request %s; the server answered %s", user, subject, m.Data)
	case <-time.After(10 * time.Second):
		t.Errorf("%s requesting %s: neither refused nor answered in 10 s", user, subject)
	}
}

// checkAPICreatesNoConsumer: as the API, every way to have the server move responses onto a subject
// the API may not publish to is refused: new consumers (each form of the create request) delivering
// onto the DLQ, a lane's work subject, the request subject, the max-deliveries advisory the worker acts
// on, the settled-requests bucket and an object's metadata; turning its own durable into a push
// consumer, or giving it an inactivity threshold so it vanishes and can be created again as one; deleting
// it. Publishing those subjects itself is refused too, but for the request subject, its own.
func checkAPICreatesNoConsumer(t *testing.T, url string) {
	t.Helper()
	subj := contracts.SubjectsFor("app")
	const stream = "APP_MEDIA_RESPONSES"
	api := "$JS.API.CONSUMER."
	targets := []string{
		subj.DLQ, "app.media.optimize.work.image", subj.Request,
		"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.APP_MEDIA_REQUESTS.mediaworker-image",
		"$KV.APP_MEDIA_SETTLED.1", "$O.media.M." + base64.URLEncoding.EncodeToString([]byte("site/p.jpg")),
	}
	create := func(name, deliver, filter string) []byte {
		b, _ := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
			"name": name, "durable_name": name, "deliver_subject": deliver, "filter_subject": filter,
			"deliver_policy": "all", "ack_policy": "none",
		}})
		return b
	}
	for _, target := range targets {
		deniedRequest(t, url, "api", api+"CREATE."+stream+".evil", create("evil", target, ""))
		deniedRequest(t, url, "api", api+"CREATE."+stream+".evil."+subj.Response, create("evil", target, subj.Response))
		deniedRequest(t, url, "api", api+"DURABLE.CREATE."+stream+".evil", create("evil", target, ""))
		legacy, _ := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
			"deliver_subject": target, "deliver_policy": "all", "ack_policy": "none"}})
		deniedRequest(t, url, "api", api+"CREATE."+stream, legacy)
		if target != subj.Request { // the one subject the API publishes itself
			deniedPublish(t, url, "api", target)
		}
	}
	deniedRequest(t, url, "api", api+"CREATE."+stream+".api", create("api", subj.DLQ, ""))
	vanishing, _ := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
		"durable_name": "api", "filter_subjects": []string{subj.Response, subj.Virus}, "deliver_policy": "all",
		"ack_policy": "explicit", "inactive_threshold": int64(time.Second)}})
	deniedRequest(t, url, "api", api+"CREATE."+stream+".api", vanishing)
	deniedRequest(t, url, "api", api+"DELETE."+stream+".api", nil)
}

// readResponsesAsAPI: what the API may do with its provisioned durable, with nats.go as an API would:
// find the responses stream by subject, bind the durable, fetch and ack the want messages (responses
// and virus events, in stream order).
func readResponsesAsAPI(t *testing.T, ctx context.Context, js jetstream.JetStream, want int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a refused request is answered with silence
	defer cancel()
	subj := contracts.SubjectsFor("app")
	stream, err := js.StreamNameBySubject(ctx, subj.Response)
	if err != nil || stream != "APP_MEDIA_RESPONSES" {
		t.Fatalf("the API finding the responses stream: %q, %v", stream, err)
	}
	cons, err := js.Consumer(ctx, stream, "api")
	if err != nil {
		t.Fatalf("the API binding its durable: %v", err)
	}
	var subjects []string
	for len(subjects) < want {
		batch, err := cons.Fetch(want-len(subjects), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("the API fetching from its durable: %v", err)
		}
		n := 0
		for m := range batch.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatalf("the API acking %s: %v", m.Subject(), err)
			}
			subjects = append(subjects, m.Subject())
			n++
		}
		if err := batch.Error(); err != nil || n == 0 {
			t.Fatalf("the API read %d of %d messages from its durable: %v", len(subjects), want, err)
		}
	}
	return subjects
}

func countSubjects(subjects []string) map[string]int {
	c := map[string]int{}
	for _, s := range subjects {
		c[s]++
	}
	return c
}
