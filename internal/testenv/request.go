package testenv

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publishing requests as an API does, for the tests of every package that talks to a worker.

// NewRequest returns a valid request for bucket/key under a fresh mediaId.
func NewRequest(bucket, key string) contracts.Request {
	id := uuid.NewString()
	return contracts.Request{S3Key: key, S3Bucket: bucket, MediaID: id, MediaURL: "https://api.example/v1/media/" + id}
}

// PublishRequest publishes req with Nats-Msg-Id: its mediaId (and any further options).
func PublishRequest(t testing.TB, js jetstream.JetStream, subject string, req contracts.Request, opts ...jetstream.PublishOpt) {
	t.Helper()
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	PublishRaw(t, js, subject, data, req.MediaID, opts...)
}

// PublishRaw publishes a request payload (valid or not) with a JetStream publish and Nats-Msg-Id: msgID.
func PublishRaw(t testing.TB, js jetstream.JetStream, subject string, data []byte, msgID string, opts ...jetstream.PublishOpt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data}, append([]jetstream.PublishOpt{jetstream.WithMsgID(msgID)}, opts...)...); err != nil {
		t.Fatalf("publishing request: %v", err)
	}
}
