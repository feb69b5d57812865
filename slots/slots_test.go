package slots

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPoolBoundsConcurrency(t *testing.T) {
	p := NewPool("image", 3)
	var cur, peak atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, err := p.Acquire(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			defer release()
			n := cur.Add(1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			cur.Add(-1)
		}()
	}
	wg.Wait()
	if peak.Load() > 3 || peak.Load() < 1 {
		t.Fatalf("peak concurrency %d, want 1..3", peak.Load())
	}
	if p.Active() != 0 {
		t.Fatalf("after all released: active %d", p.Active())
	}
}

func TestAcquireHonoursContextAndDoubleRelease(t *testing.T) {
	p := NewPool("video", 1)
	release, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
	release()
	release() // must not free a second slot
	if p.Active() != 0 {
		t.Fatalf("double release corrupted the pool: active %d", p.Active())
	}
	// Exactly one slot is free again: one Acquire succeeds at once, a second waits.
	r2, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal("slot not free after release")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := p.Acquire(ctx2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a double release freed a second slot: %v", err)
	}
	r2()
}
