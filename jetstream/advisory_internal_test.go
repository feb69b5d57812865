package jetstream

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// LeaderGetMsg must return what a stream holds at a sequence, headers included, and report a
// removed message as ErrMsgNotFound, on a stream that also allows direct gets.
func TestLeaderGetMsg(t *testing.T) {
	nc := testenv.Connect(t, testenv.StartNATS(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WQ", Subjects: []string{"wq.>"},
		Retention: jetstream.WorkQueuePolicy, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg("wq.a")
	msg.Data = []byte(`{"mediaId":"x"}`)
	msg.Header.Set("Traceparent", "00-abc-def-01")
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LeaderGetMsg(ctx, nc, "WQ", ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if got.Subject != "wq.a" || got.Sequence != ack.Sequence || string(got.Data) != `{"mediaId":"x"}` ||
		got.Header.Get("Traceparent") != "00-abc-def-01" || got.Time.IsZero() {
		t.Fatalf("got %+v", got)
	}
	if err := s.DeleteMsg(ctx, ack.Sequence); err != nil {
		t.Fatal(err)
	}
	if _, err := LeaderGetMsg(ctx, nc, "WQ", ack.Sequence); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("deleted message: %v, want ErrMsgNotFound", err)
	}
	if _, err := LeaderGetMsg(ctx, nc, "NOPE", 1); err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("missing stream: %v", err)
	}
}
