package app

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

func from(addr string) *http.Request { return &http.Request{RemoteAddr: addr} }

// fakeThrottle is a throttle with burst 3, one token forgiven per 10 s, at most 4 addresses and 2
// checks waiting behind the running one, on a clock that moves only when told; its tarpit returns at
// once, counting how often it was entered.
func fakeThrottle() (th *throttle, now *time.Time, tarpits *int) {
	th = newThrottle()
	th.burst, th.every, th.max, th.queue = 3, 10*time.Second, 4, 2
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	now, tarpits = &t0, new(int)
	th.now = func() time.Time { return *now }
	th.sleep = func(context.Context, time.Duration) error { *tarpits++; return nil }
	return th, now, tarpits
}

// tokenCheck is one token check from addr with a right or wrong token.
func tokenCheck(th *throttle, addr string, right bool) (bool, time.Duration) {
	return th.Check(from(addr), func() bool { return right })
}

// TestThrottleSlowsGuessesNeverTheRightToken: an address gets its burst of wrong tokens checked at once
// (401); then every check from it goes through the tarpit, wrong ones answered with a Retry-After of the
// time its checks stay slowed, and the right token passes, also there, without forgiving anything; right
// tokens cost no budget; a debt is forgiven with time, so an address that stops guessing is checked at
// once again; other addresses are never slowed; one IPv6 host's /64 is one address.
func TestThrottleSlowsGuessesNeverTheRightToken(t *testing.T) {
	th, now, tarpits := fakeThrottle()
	const a = "192.0.2.1:5000"

	for range 5 { // right tokens spend nothing
		if ok, retry := tokenCheck(th, a, true); !ok || retry != 0 {
			t.Fatalf("right token within the budget: %v, %s", ok, retry)
		}
	}
	for i := range 3 {
		if ok, retry := tokenCheck(th, a, false); ok || retry != 0 {
			t.Fatalf("wrong token %d within the budget: %v, retry %s; want 401 (retry 0)", i, ok, retry)
		}
	}
	if *tarpits != 0 {
		t.Fatalf("%d checks within the budget went through the tarpit", *tarpits)
	}
	// Over budget: wrong tokens are checked after the tarpit and answered 429, 10 s (one interval).
	for i := range 20 {
		ok, retry := tokenCheck(th, a, false)
		if ok || retry != 10*time.Second || retryAfter(retry) != "10" {
			t.Fatalf("wrong token %d over budget: %v, retry %s; want 429 with 10 s", i, ok, retry)
		}
	}
	if *tarpits != 20 {
		t.Fatalf("%d of the 20 checks over budget went through the tarpit", *tarpits)
	}
	// The right token passes from that address at once (after the tarpit), and forgives nothing.
	if ok, retry := tokenCheck(th, a, true); !ok || retry != 0 || *tarpits != 21 {
		t.Fatalf("right token over budget: %v, retry %s, tarpits %d; want it through the tarpit", ok, retry, *tarpits)
	}
	for _, same := range []string{"192.0.2.1:6000", "[::ffff:192.0.2.1]:6000"} {
		if ok, retry := tokenCheck(th, same, false); ok || retry == 0 {
			t.Fatalf("%s, the same address, has a budget of its own", same)
		}
	}
	*tarpits = 0
	if ok, retry := tokenCheck(th, "192.0.2.2:5000", false); ok || retry != 0 || *tarpits != 0 {
		t.Fatalf("another address is slowed for the first one's guesses: %v, %s, tarpits %d", ok, retry, *tarpits)
	}

	// 9.5 s on, the address is still slowed, for 0.5 s (Retry-After rounds up to 1 s); at 10 s its
	// next wrong token is checked at once again (401), and the one after it is slowed again.
	*now = now.Add(9500 * time.Millisecond)
	if got := th.slowedFor(th.clients["192.0.2.1"], *now); got != time.Second {
		t.Fatalf("0.5 s before it ends: slowed for %s, want the 1 s floor", got)
	}
	*now = now.Add(500 * time.Millisecond)
	if ok, retry := tokenCheck(th, a, false); ok || retry != 0 || *tarpits != 0 {
		t.Fatalf("an interval after the last wrong token: %v, retry %s, tarpits %d; want 401 at once", ok, retry, *tarpits)
	}
	if ok, retry := tokenCheck(th, a, false); ok || retry != 10*time.Second || *tarpits != 1 {
		t.Fatalf("the wrong token after it: %v, retry %s, tarpits %d; want 429 through the tarpit", ok, retry, *tarpits)
	}

	// One IPv6 host with a /64: all its addresses spend one budget; the next /64 is someone else.
	for i := range 3 {
		tokenCheck(th, fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), false)
	}
	*tarpits = 0
	if ok, retry := tokenCheck(th, "[2001:db8:1:2:ffff::9%eth0]:443", true); !ok || *tarpits != 1 {
		t.Fatalf("another address of the same IPv6 /64 has a budget of its own (%v, %s, %d)", ok, retry, *tarpits)
	}
	if ok, retry := tokenCheck(th, "[2001:db8:1:3::1]:443", false); ok || retry != 0 || *tarpits != 1 {
		t.Fatalf("the next /64 is slowed: %v, %s", ok, retry)
	}
}

// TestThrottleStaysBounded: only addresses that owe something are kept (a right token leaves nothing
// behind), never more than the cap; addresses beyond it share one budget instead of getting none, and
// the addresses tracked before are not slowed for them; paid-off addresses are forgotten when room is
// needed; concurrent wrong tokens from one address cannot all spend its last unit of budget.
func TestThrottleStaysBounded(t *testing.T) {
	th, now, _ := fakeThrottle()
	for i := range 50 {
		tokenCheck(th, fmt.Sprintf("203.0.113.%d:1", i), true)
	}
	if n := len(th.clients); n != 0 {
		t.Fatalf("tracking %d addresses after right tokens only, want none", n)
	}
	for i := range 4 {
		tokenCheck(th, fmt.Sprintf("192.0.2.%d:1", i), false)
	}
	for i := range 4 {
		if ok, retry := tokenCheck(th, fmt.Sprintf("198.51.100.%d:1", i), false); ok || (i < 3) != (retry == 0) {
			t.Fatalf("newcomer %d beyond the cap: %v, %s; want the shared budget of 3", i, ok, retry)
		}
	}
	if n := len(th.clients); n != 4 {
		t.Fatalf("tracking %d addresses, cap 4", n)
	}
	if ok, retry := tokenCheck(th, "198.51.100.200:1", true); !ok || retry != 0 {
		t.Fatalf("the right token from a newcomer beyond the cap: %v, %s", ok, retry)
	}
	if ok, retry := tokenCheck(th, "192.0.2.0:1", false); ok || retry != 0 {
		t.Fatalf("an address tracked before the overflow is slowed for the newcomers' guesses: %v, %s", ok, retry)
	}

	// Half a minute on, every debt is paid: the next newcomer's wrong token makes room.
	*now = now.Add(31 * time.Second)
	tokenCheck(th, "203.0.113.1:1", false)
	if n := len(th.clients); n != 1 {
		t.Fatalf("tracking %d addresses after all debts were paid, want only the newest", n)
	}
	if ok, retry := tokenCheck(th, "198.51.100.201:1", false); ok || retry != 0 {
		t.Fatalf("a newcomer after the overflow was paid off: %v, %s; want 401", ok, retry)
	}

	// 40 wrong tokens at once from a fresh address: exactly its budget of them is checked at once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	fast := 0
	for range 40 {
		wg.Go(func() {
			if ok, retry := tokenCheck(th, "192.0.2.200:1", false); !ok && retry == 0 {
				mu.Lock()
				fast++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if fast != th.burst {
		t.Fatalf("%d of 40 concurrent wrong tokens were checked within the budget, want %d", fast, th.burst)
	}
}

// TestThrottleTarpitIsOneAtATime: over budget, an address's checks run one at a time, each after the
// tarpit; with queue checks waiting behind the running one, the next is answered 429 at once without
// being checked; a client that goes away while waiting for its turn, or during the tarpit, frees its
// place and is not checked; afterwards nothing waits and nothing is held.
func TestThrottleTarpitIsOneAtATime(t *testing.T) {
	th, _, _ := fakeThrottle()
	const a = "192.0.2.9:1"
	for range th.burst {
		tokenCheck(th, a, false)
	}
	// The tarpit: each check in it says so, then waits to be let go (or for its client to go away).
	entered, release := make(chan string), make(chan struct{})
	th.sleep = func(ctx context.Context, _ time.Duration) error {
		select {
		case entered <- fmt.Sprint(ctx.Value(nameKey{})):
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var mu sync.Mutex
	var checked []string
	type result struct {
		name  string
		ok    bool
		retry time.Duration
	}
	results := make(chan result, 10)
	var wg sync.WaitGroup
	start := func(ctx context.Context, name string, right bool) {
		r := from(a).WithContext(context.WithValue(ctx, nameKey{}, name))
		wg.Go(func() {
			ok, retry := th.Check(r, func() bool {
				mu.Lock()
				checked = append(checked, name)
				mu.Unlock()
				return right
			})
			results <- result{name, ok, retry}
		})
	}
	waiting := func(n int) {
		t.Helper()
		for range 500 {
			th.mu.Lock()
			c := th.clients["192.0.2.9"]
			got := c.waiting
			th.mu.Unlock()
			if got == n {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Fatalf("never %d checks in the tarpit", n)
	}

	bg := context.Background()
	gone1, leave1 := context.WithCancel(bg)
	gone2, leave2 := context.WithCancel(bg)
	start(bg, "first", false)
	if got := <-entered; got != "first" {
		t.Fatalf("%s entered the tarpit first", got)
	}
	start(gone1, "leaves-waiting", false)
	waiting(2)
	start(bg, "owner", true) // queue is 2: the running check and two waiting
	waiting(3)
	start(bg, "one-too-many", true)
	if r := <-results; r.name != "one-too-many" || r.ok || r.retry < time.Second {
		t.Fatalf("a check beyond the queue: %+v; want 429 at once", r)
	}
	select {
	case name := <-entered:
		t.Fatalf("%s entered the tarpit while %q held it", name, "first")
	case <-time.After(20 * time.Millisecond):
	}
	leave1() // gone while waiting: its place is free at once
	if r := <-results; r.name != "leaves-waiting" || r.ok || r.retry == 0 {
		t.Fatalf("a client gone while waiting: %+v", r)
	}
	waiting(2)
	release <- struct{}{} // first is checked (wrong) and answered; the owner's turn
	if r := <-results; r.name != "first" || r.ok || r.retry == 0 {
		t.Fatalf("the first check: %+v; want 429", r)
	}
	if got := <-entered; got != "owner" {
		t.Fatalf("%s entered the tarpit after the first, want the owner", got)
	}
	start(gone2, "leaves-in-tarpit", false)
	waiting(2)
	release <- struct{}{}
	if r := <-results; r.name != "owner" || !r.ok || r.retry != 0 {
		t.Fatalf("the owner's right token over budget: %+v; want it to pass", r)
	}
	if got := <-entered; got != "leaves-in-tarpit" {
		t.Fatalf("%s entered the tarpit, want leaves-in-tarpit", got)
	}
	leave2()
	if r := <-results; r.name != "leaves-in-tarpit" || r.ok || r.retry == 0 {
		t.Fatalf("a client gone during the tarpit: %+v", r)
	}
	wg.Wait()

	if fmt.Sprint(checked) != "[first owner]" {
		t.Fatalf("checked %v, want [first owner]: the others were refused or gone before their turn", checked)
	}
	c := th.clients["192.0.2.9"]
	if c == nil || c.waiting != 0 || c.checks != 0 || len(c.lane) != 0 {
		t.Fatalf("after the checks: %+v, want nothing waiting and the lane free", c)
	}

	// The real tarpit waits its time, or less for a client that goes away, and leaves no timer behind.
	if err := sleepCtx(bg, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	gone, leave := context.WithCancel(bg)
	leave()
	if err := sleepCtx(gone, time.Hour); err == nil {
		t.Fatal("the tarpit outlived its client")
	}
}

type nameKey struct{}
