package webhooks_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/webhooks"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A 410 whose pause is refused (a NATS account without $JS.API.CONSUMER.PAUSE, a server older than
// 2.11) must not hand the answer straight back: that re-sent it in a tight loop to the endpoint that
// said it is gone. It waits as a failed attempt does.
func TestGoneWithoutPauseDoesNotHammer(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "w", Password: "w", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.CONSUMER.PAUSE.>"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("w", "w"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := rigOn(t, js)
	secret := newSecret(t)
	rc := newReceiver(t, secret)
	rc.setAnswer(func(*http.Request) int { return http.StatusGone })
	var obs counter
	r.start(webhooks.Config{Schedule: steps(3, time.Hour),
		Endpoints: []webhooks.Endpoint{{Name: "api", URL: rc.url(), Secrets: []string{secret}, AllowPrivate: true, Concurrency: 1}}}, &obs)
	r.answer(uuid.NewString(), "media", "")
	eventually(t, 10*time.Second, "tried once", func() bool { return obs.get("api/"+webhooks.ResultDisabled)+obs.get("api/"+webhooks.ResultRetry) >= 1 })
	time.Sleep(time.Second)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.requests != 1 {
		t.Fatalf("the endpoint that answered 410 got %d requests in a second, want 1 (the next an hour later)", rc.requests)
	}
}
