package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// rescueClaims make one instance the one that settles a stranded message (rescue.go) or a message a
// max-deliveries advisory names (advisory.go): a claim per stream sequence, rescue.<seq>, kept in the
// settled-requests bucket beside the requests' records.
type rescueClaims struct{ mem *settledMemory }

// Rescue claim states, the values of rescue.<seq> in the settled-requests bucket.
const (
	claimHeld     = "held"     // an instance is rescuing it
	claimRequeued = "requeued" // the copy is stored; only the removal of the stranded one is left
)

// release gives a claim back after a failed attempt (unless it got as far as the copy: then the
// claim says so). Should this fail too, the claim is taken over after rescueClaimTTL.
func (c *rescueClaims) release(seq uint64, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	kv, err := c.mem.bucket(ctx)
	if err != nil {
		return
	}
	if e, err := kv.Get(ctx, rescueKey(seq)); err == nil && strings.HasPrefix(string(e.Value()), claimHeld) {
		_ = kv.Delete(ctx, rescueKey(seq), jetstream.LastRevision(e.Revision()))
	}
}

func rescueKey(seq uint64) string { return "rescue." + strconv.FormatUint(seq, 10) }

// claim makes this instance the one that rescues seq. It returns the claim's state ("" when
// another instance holds it): claimHeld, or claimRequeued when an earlier holder stored the copy and
// only its removal is left.
func (c *rescueClaims) claim(ctx context.Context, seq uint64) (string, error) {
	kv, err := c.mem.bucket(ctx)
	if err != nil {
		return "", err
	}
	key, value := rescueKey(seq), []byte(claimHeld+" "+time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := kv.Create(ctx, key, value); err == nil {
		return claimHeld, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return "", fmt.Errorf("claiming the rescue of %d: %w", seq, err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("reading the rescue claim of %d: %w", seq, err)
	}
	if strings.HasPrefix(string(e.Value()), claimRequeued) {
		return claimRequeued, nil // removing twice is harmless: whoever comes first
	}
	if time.Since(e.Created()) < rescueClaimTTL {
		return "", nil
	}
	if _, err := kv.Update(ctx, key, value, e.Revision()); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return "", nil // another instance took it over first
		}
		return "", fmt.Errorf("taking over the rescue claim of %d: %w", seq, err)
	}
	return claimHeld, nil
}

// markRequeued records that seq's copy is stored, so no later holder of the claim stores another.
func (c *rescueClaims) markRequeued(ctx context.Context, seq uint64) error {
	kv, err := c.mem.bucket(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, rescueKey(seq), []byte(claimRequeued)); err != nil {
		return fmt.Errorf("recording the hand-back of %d: %w", seq, err)
	}
	return nil
}
