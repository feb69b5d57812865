package app

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func from(addr string) *http.Request { return &http.Request{RemoteAddr: addr} }

// TestThrottleForgivesAndStaysBounded: an address gets its burst of wrong tokens, then one per
// interval, with the wait to say when; its debt is forgiven with time and then forgotten; the map never
// holds more than its cap, and addresses beyond it share one budget instead of getting none; one IPv6
// host's /64 is one address.
func TestThrottleForgivesAndStaysBounded(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	th := newThrottle()
	th.burst, th.every, th.max = 3, 10*time.Second, 4
	th.now = func() time.Time { return now }

	a := from("192.0.2.1:5000")
	for i := range 3 {
		if w := th.Wait(a); w != 0 {
			t.Fatalf("wrong token %d: wait %s before the burst is used", i, w)
		}
		th.Failed(a)
	}
	if w := th.Wait(a); w != 10*time.Second || retryAfter(w) != "10" {
		t.Fatalf("after the burst: wait %s, want 10s", w)
	}
	if w := th.Wait(from("192.0.2.1:6000")); w == 0 {
		t.Fatal("another port of the same address has a budget of its own")
	}
	if w := th.Wait(from("[::ffff:192.0.2.1]:6000")); w == 0 {
		t.Fatal("the IPv4-mapped spelling of the address has a budget of its own")
	}
	if w := th.Wait(from("192.0.2.2:5000")); w != 0 {
		t.Fatalf("another address waits %s for the first one's guesses", w)
	}
	now = now.Add(9500 * time.Millisecond)
	if w := th.Wait(a); w != 500*time.Millisecond || retryAfter(w) != "1" {
		t.Fatalf("0.5 s before the next check: wait %s (Retry-After %s)", w, retryAfter(w))
	}
	now = now.Add(500 * time.Millisecond)
	if w := th.Wait(a); w != 0 {
		t.Fatalf("one interval on: wait %s, want one more check", w)
	}
	th.Failed(a)
	if w := th.Wait(a); w != 10*time.Second {
		t.Fatalf("a wrong token after the interval: wait %s, want 10s again", w)
	}

	// One IPv6 host with a /64: all its addresses spend one budget; the next /64 is someone else.
	for i := range 3 {
		th.Failed(from(fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1)))
	}
	if w := th.Wait(from("[2001:db8:1:2:ffff::9%eth0]:443")); w == 0 {
		t.Fatal("another address of the same IPv6 /64 has a budget of its own")
	}
	if w := th.Wait(from("[2001:db8:1:3::1]:443")); w != 0 {
		t.Fatalf("the next /64 waits %s", w)
	}

	// The map is full (192.0.2.1, the /64, and two more); newcomers share the overflow budget.
	th.Failed(from("192.0.2.3:1"))
	th.Failed(from("192.0.2.4:1"))
	for i := range 3 {
		th.Failed(from(fmt.Sprintf("198.51.100.%d:1", i)))
	}
	if n := len(th.paidOff); n != 4 {
		t.Fatalf("tracking %d addresses, cap 4", n)
	}
	if w := th.Wait(from("198.51.100.200:1")); w == 0 {
		t.Fatal("addresses beyond the cap guess without limit")
	}
	if w := th.Wait(from("192.0.2.3:1")); w != 0 {
		t.Fatalf("an address tracked before the overflow waits %s for the newcomers' guesses", w)
	}

	// Half a minute on, everyone's debts are paid: the next newcomer's failure clears the map.
	now = now.Add(31 * time.Second)
	th.Failed(from("203.0.113.1:1"))
	if n := len(th.paidOff); n != 1 {
		t.Fatalf("tracking %d addresses after all debts were paid, want only the newest", n)
	}
	for _, addr := range []string{"192.0.2.1:5000", "198.51.100.200:1", "[2001:db8:1:2::1]:443"} {
		if w := th.Wait(from(addr)); w != 0 {
			t.Errorf("%s still waits %s after its debt was paid", addr, w)
		}
	}
}
