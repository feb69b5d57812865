package membudget_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/membudget"
)

const mib = 1 << 20

func newBudget(t *testing.T, size int64) *membudget.Budget {
	t.Helper()
	b, err := membudget.New(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// acquireAsync starts an Acquire and returns where its result arrives.
func acquireAsync(ctx context.Context, b *membudget.Budget, n int64) <-chan func() {
	got := make(chan func(), 1)
	go func() {
		release, err := b.Acquire(ctx, n)
		if err != nil {
			close(got)
			return
		}
		got <- release
	}()
	return got
}

func waiting(b *membudget.Budget, n int) func() error {
	return func() error {
		if s := b.Stats(); s.Waiting != n {
			return fmt.Errorf("%d waiting, want %d", s.Waiting, n)
		}
		return nil
	}
}

func TestRefusesABudgetBelowTheLeast(t *testing.T) {
	if _, err := membudget.New(16 * mib); err == nil || !strings.Contains(err.Error(), "32 MiB") {
		t.Fatalf("a 16 MiB budget: %v, want a refusal naming the least (32 MiB)", err)
	}
}

func TestAdmitsWhileTheSumFits(t *testing.T) {
	b := newBudget(t, 100*mib)
	r1, err := b.Acquire(context.Background(), 60*mib)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.Acquire(context.Background(), 40*mib)
	if err != nil {
		t.Fatal(err)
	}
	third := acquireAsync(context.Background(), b, 10*mib)
	testenv.Eventually(t, 10*time.Second, waiting(b, 1))
	r1()
	r3 := <-third
	if r3 == nil {
		t.Fatal("the third Acquire failed after the first released")
	}
	r1() // a second release gives nothing back twice
	r2()
	r3()
	s := b.Stats()
	if s.InUse != 0 || s.Peak != 100*mib || s.Admitted != 3 || s.Waited != 1 || s.Waiting != 0 {
		t.Fatalf("stats %+v: want nothing in use, peak 100 MiB, 3 admitted of which 1 waited", s)
	}
}

func TestAJobLargerThanTheBudgetRunsAlone(t *testing.T) {
	b := newBudget(t, 64*mib)
	small, err := b.Acquire(context.Background(), 8*mib)
	if err != nil {
		t.Fatal(err)
	}
	big := acquireAsync(context.Background(), b, 1<<30) // 1 GiB: larger than the whole budget
	testenv.Eventually(t, 10*time.Second, waiting(b, 1))
	// In order: a small job arriving after the big one waits behind it even though it would fit.
	later := acquireAsync(context.Background(), b, 8*mib)
	testenv.Eventually(t, 10*time.Second, waiting(b, 2))
	small()
	rBig := <-big
	if rBig == nil {
		t.Fatal("the oversized job was refused; it must run alone")
	}
	if s := b.Stats(); s.InUse != 64*mib || s.Alone != 1 || s.Waiting != 1 {
		t.Fatalf("stats %+v: the oversized job must hold the whole budget with the later one waiting", s)
	}
	rBig()
	if r := <-later; r == nil {
		t.Fatal("the job behind the oversized one was refused")
	} else {
		r()
	}
	if s := b.Stats(); s.InUse != 0 {
		t.Fatalf("in use after all released: %d", s.InUse)
	}
}

func TestCancelWhileWaitingReleasesNothingTwice(t *testing.T) {
	b := newBudget(t, 64*mib)
	hold, err := b.Acquire(context.Background(), 48*mib)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	stopping := errors.New("draining")
	errc := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, 32*mib)
		errc <- err
	}()
	testenv.Eventually(t, 10*time.Second, waiting(b, 1))
	// A second waiter behind the cancelled one (it would fit, but waits in order): it must be
	// admitted once the first leaves the queue.
	behind := acquireAsync(context.Background(), b, 16*mib)
	testenv.Eventually(t, 10*time.Second, waiting(b, 2))
	cancel(stopping)
	if err := <-errc; !errors.Is(err, stopping) || !strings.HasPrefix(err.Error(), "waiting for memory: ") {
		t.Fatalf("cancelled Acquire: %v, want the cause wrapped as waiting for memory", err)
	}
	r := <-behind
	if r == nil {
		t.Fatal("the waiter behind the cancelled one was not admitted (16 MiB fit)")
	}
	r()
	hold()
	hold()
	if s := b.Stats(); s.InUse != 0 || s.Waiting != 0 || s.Admitted != 2 {
		t.Fatalf("stats %+v: want nothing in use, nobody waiting, 2 admitted", s)
	}
	// The whole budget is free again, exactly once: 64 MiB fit, a byte more waits.
	all, err := b.Acquire(context.Background(), 64*mib)
	if err != nil {
		t.Fatal(err)
	}
	defer all()
	if s := b.Stats(); s.InUse != 64*mib {
		t.Fatalf("in use %d after taking all, want 64 MiB", s.InUse)
	}
}

func TestCloseFailsWaitersAndIsIdempotent(t *testing.T) {
	b := newBudget(t, 32*mib)
	hold, err := b.Acquire(context.Background(), 32*mib)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := b.Acquire(context.Background(), mib)
		errc <- err
	}()
	testenv.Eventually(t, 10*time.Second, waiting(b, 1))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, membudget.ErrClosed) {
		t.Fatalf("waiter on Close: %v, want ErrClosed", err)
	}
	if _, err := b.Acquire(context.Background(), mib); !errors.Is(err, membudget.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	hold() // what was admitted is given back after Close without harm
	if s := b.Stats(); s.InUse != 0 || s.Waiting != 0 {
		t.Fatalf("stats after Close and release: %+v", s)
	}
}
