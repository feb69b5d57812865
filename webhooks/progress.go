package webhooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Progress events are published on core NATS and kept nowhere: there is nothing to deliver again
// from, and a progress event is superseded by the next one a second later anyway. So an endpoint that
// asks for them gets each at most once: no retries, and when it falls behind (more than
// progressBuffer waiting) the surplus is dropped and counted, rather than piling up or delaying
// anything else. The subscription is a queue group per endpoint, so with several instances each event
// is sent by one of them.

// ResultDropped counts progress events not delivered: failed, or dropped while the endpoint was behind.
const ResultDropped = "dropped"

// progressBuffer is how many progress events may wait for one endpoint.
const progressBuffer = 64

// progressTimeout bounds one progress request: a late progress event is worth nothing.
const progressTimeout = 5 * time.Second

// followProgress subscribes the endpoint to progress and starts its sender.
func (r *runner) followProgress(ctx context.Context) error {
	ch := make(chan *nats.Msg, progressBuffer)
	sub, err := r.d.js.Conn().QueueSubscribe(r.d.subj.ProgressWildcard(), Durable(r.ep.Name), func(m *nats.Msg) {
		select {
		case ch <- m:
		default:
			r.d.obs.WebhookDelivery(r.ep.Name, ResultDropped)
		}
	})
	if err != nil {
		return fmt.Errorf("subscribing webhook endpoint %q to progress: %w", r.ep.Name, err)
	}
	r.progress = sub
	r.d.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-ch:
				r.sendProgress(ctx, m)
			}
		}
	})
	return nil
}

func (r *runner) sendProgress(ctx context.Context, m *nats.Msg) {
	if r.snapshot().Status == StatusDisabled {
		r.d.obs.WebhookDelivery(r.ep.Name, ResultDropped)
		return
	}
	h := sha256.Sum256([]byte(r.ep.Name + "\x00" + m.Subject + "\x00" + strconv.FormatInt(time.Now().UnixNano(), 10) + "\x00" + string(m.Data)))
	id := "msg_" + hex.EncodeToString(h[:16])
	sctx, cancel := context.WithTimeout(ctx, min(r.ep.timeout(), progressTimeout))
	defer cancel()
	res := r.client.send(sctx, id, m.Data)
	switch {
	case res.ok():
		r.d.obs.WebhookDelivery(r.ep.Name, ResultDelivered)
	case res.status == 410:
		r.disable(ctx, res)
		r.d.obs.WebhookDelivery(r.ep.Name, ResultDisabled)
	default:
		r.d.obs.WebhookDelivery(r.ep.Name, ResultDropped)
	}
}
