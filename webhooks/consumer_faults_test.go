package webhooks_test

// Faults of the consumer the deliveries read: a pause the account refuses, an ack wait shorter than a
// delivery.

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/webhooks"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A 410 whose pause is refused (a NATS account without $JS.API.CONSUMER.PAUSE, a server older than
// 2.11) must not hand the answer straight back: that re-sent it in a tight loop to the endpoint that
// said it is gone. It waits as a failed attempt does.
func TestGoneWithoutPauseDoesNotHammer(t *testing.T) {
	s := testenv.StartNATSWith(t, &server.Options{JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{{Username: "w", Password: "w", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.CONSUMER.PAUSE.>"}}}}}})
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

// A delivery slower than the consumer's ack wait (set shorter by another instance with a shorter
// timeout, or by an operator) is not handed to another loop and sent again while it is under way.
func TestSlowDeliveryNotSentTwiceAtOnce(t *testing.T) {
	defer webhooks.SetInProgressEvery(300 * time.Millisecond)()
	r := newRig(t)
	secret := newSecret(t)
	rc := newReceiver(t, secret)
	var inFlight, most atomic.Int32
	rc.setAnswer(func(*http.Request) int {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-time.After(4 * time.Second):
		case <-rc.release:
		}
		return http.StatusOK
	})
	var obs counter
	r.start(webhooks.Config{Schedule: steps(3, time.Hour),
		Endpoints: []webhooks.Endpoint{{Name: "api", URL: rc.url(), Secrets: []string{secret}, AllowPrivate: true, Timeout: 30 * time.Second}}}, &obs)
	ctx := context.Background()
	c, err := r.js.Consumer(ctx, r.streams.Responses, webhooks.Durable("api"))
	if err != nil {
		t.Fatal(err)
	}
	cc := c.CachedInfo().Config
	cc.AckWait = time.Second // as another instance with a shorter timeout, or `nats consumer edit`, sets it
	if _, err := r.js.UpdateConsumer(ctx, r.streams.Responses, cc); err != nil {
		t.Fatal(err)
	}
	r.answer(uuid.NewString(), "media", "")
	eventually(t, 20*time.Second, "delivered", func() bool { return obs.get("api/"+webhooks.ResultDelivered) == 1 })
	rc.mu.Lock()
	reqs := rc.requests
	rc.mu.Unlock()
	if most.Load() != 1 || reqs != 1 {
		t.Fatalf("one answer was sent %d times, %d at once; want once", reqs, most.Load())
	}
}
