package app

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Wrong operator tokens are budgeted per client address, and one budget serves the scan API and the
// console together: switching surface buys no fresh guesses. An address may get wrongTokenBurst tokens
// wrong (an operator's typos) and then one more every wrongTokenEvery; past that its token checks answer
// 429 with Retry-After, whatever the token, because answering a right token from an address that is
// over its budget would make 429 merely mean "wrong" and let the guessing go on at full speed. Other
// addresses are never refused for its failures, and a browser logged in to the console (its cookie is
// 256 bits, not something to guess) is not a token check at all, so it keeps working even there.
//
// The client address is the TCP peer, never X-Forwarded-For (any client can write that). Behind a
// reverse proxy every client is the proxy's address; the budget then guards the proxy's clients
// together, as the console's single budget used to.
const (
	wrongTokenBurst = 10
	wrongTokenEvery = time.Minute
	// throttledAddresses bounds memory (about 100 bytes each). When that many addresses are all still
	// paying off wrong tokens, every other address shares one budget: a guesser with more addresses than
	// this slows new clients' typos, not the checks of right tokens from addresses under budget.
	throttledAddresses = 10000
)

// throttle is a budget of wrong tokens per client address (a generic cell rate algorithm: each
// address keeps the time by which all its wrong tokens are forgiven).
type throttle struct {
	burst int
	every time.Duration
	max   int
	now   func() time.Time

	mu       sync.Mutex
	paidOff  map[string]time.Time // per address: when its wrong tokens are all forgiven
	overflow time.Time            // the same, shared by the addresses that found the map full
}

func newThrottle() *throttle {
	return &throttle{burst: wrongTokenBurst, every: wrongTokenEvery, max: throttledAddresses, now: time.Now,
		paidOff: map[string]time.Time{}}
}

// Wait is how long r's client must wait before its next token is checked: 0 while it has budget left.
func (t *throttle) Wait(r *http.Request) time.Duration {
	key := clientAddress(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.paidOff[key]
	if !ok && len(t.paidOff) >= t.max {
		at = t.overflow
	}
	now := t.now()
	if !at.After(now) { // owes nothing (or is unknown: Sub from the zero time would saturate)
		return 0
	}
	// A full budget is burst wrong tokens owed; the next check waits until one of them is forgiven.
	if d := at.Sub(now) - time.Duration(t.burst-1)*t.every; d > 0 {
		return d
	}
	return 0
}

// Failed records a wrong token from r's client.
func (t *throttle) Failed(r *http.Request) {
	key := clientAddress(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	at, ok := t.paidOff[key]
	if !ok && len(t.paidOff) >= t.max {
		t.forget(now)
	}
	if !ok && len(t.paidOff) >= t.max {
		t.overflow = owing(t.overflow, now, t.every)
		return
	}
	t.paidOff[key] = owing(at, now, t.every)
}

// owing adds one wrong token to a debt that is paid off at at.
func owing(at, now time.Time, every time.Duration) time.Time {
	if at.Before(now) {
		at = now
	}
	return at.Add(every)
}

// forget drops the addresses that owe nothing any more. It runs only when the map is full, so it costs
// one pass over it per new address during an attack from more addresses than it holds, and nothing
// otherwise.
func (t *throttle) forget(now time.Time) {
	for k, at := range t.paidOff {
		if !at.After(now) {
			delete(t.paidOff, k)
		}
	}
}

// clientAddress is who a request comes from, for the budget: the peer's IP, IPv4-mapped addresses as
// IPv4, and IPv6 by its /64 (one host usually holds a whole /64, so one address each would be a fresh
// budget per guess).
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// retryAfter is a Retry-After value for d: whole seconds, rounded up.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Seconds())))
}
