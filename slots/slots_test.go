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
	if p.Active() != 0 || p.Free() != 3 {
		t.Fatalf("after all released: active %d free %d", p.Active(), p.Free())
	}
}

func TestAcquireHonoursContextAndDoubleRelease(t *testing.T) {
	p := NewPool("video", 1)
	release, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.TryAcquire(); ok {
		t.Fatal("TryAcquire succeeded on a full pool")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
	release()
	release() // must not free a second slot
	if p.Active() != 0 || p.Free() != 1 {
		t.Fatalf("double release corrupted the pool: active %d free %d", p.Active(), p.Free())
	}
	r2, ok := p.TryAcquire()
	if !ok {
		t.Fatal("slot not free after release")
	}
	r2()
}

func TestGateParksAndHandsBackIntake(t *testing.T) {
	g := NewGate("video", 1, 1)
	running, err := g.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	intake := NewPool("intake", 2)
	take := func() (context.Context, func()) {
		r, ok := intake.TryAcquire()
		if !ok {
			t.Fatal("intake full")
		}
		return WithHandBack(context.Background(), r), r
	}

	// The second job parks and gives its intake slot back.
	ctx2, _ := take()
	got2 := make(chan func(), 1)
	go func() { r, _ := g.Acquire(ctx2); got2 <- r }()
	waitFor(t, func() bool { return g.Parked() == 1 && intake.Active() == 0 })

	// The lot is full: the third job waits holding its intake slot.
	ctx3, r3 := take()
	got3 := make(chan func(), 1)
	go func() { r, _ := g.Acquire(ctx3); got3 <- r }()
	time.Sleep(20 * time.Millisecond)
	if intake.Active() != 1 || g.Parked() != 1 {
		t.Fatalf("third job: intake %d parked %d; want 1 and 1", intake.Active(), g.Parked())
	}

	running()
	r2 := <-got2
	r2()
	r := <-got3
	r()
	r3()
	if intake.Active() != 0 || g.Parked() != 0 || g.Pool().Active() != 0 {
		t.Fatalf("leftovers: intake %d parked %d active %d", intake.Active(), g.Parked(), g.Pool().Active())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}
