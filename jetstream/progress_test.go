package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/progress"
	"github.com/nats-io/nats.go"
)

func TestProgressIsPublishedThrottled(t *testing.T) {
	r := newRig(t, nil, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		for i := 1; i <= 100; i++ { // a burst: only the first and the final report pass the 1 s throttle
			progress.Report(ctx, float64(i)/100)
		}
		return success(req)
	})
	var mu sync.Mutex
	var got []contracts.Progress
	sub, err := r.nc.Subscribe(r.cfg.Subjects().ProgressWildcard(), func(m *nats.Msg) {
		if err := contracts.ValidateJSON(contracts.SchemaProgress, m.Data); err != nil {
			t.Errorf("progress event fails its schema: %v", err)
		}
		var p contracts.Progress
		_ = json.Unmarshal(m.Data, &p)
		if m.Subject != r.cfg.Subjects().ProgressSubject(p.MediaID) {
			t.Errorf("progress for %s on %s", p.MediaID, m.Subject)
		}
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	r.start()
	id := uuid.NewString()
	r.publish(id)
	r.awaitResponses(id, 1)
	testenv.Eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 2 || got[0].Percent != 1 || got[1].Percent != 100 {
			return fmt.Errorf("progress events: %+v", got)
		}
		return nil
	})
}
