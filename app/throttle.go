package app

import (
	"context"
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
// wrong at full speed (an operator's typos); the budget refills by one every wrongTokenEvery.
//
// An address over its budget is slowed, never locked out: the right token always works, from that
// address too, as soon as it is checked. Its checks run one at a time, each answered no sooner than
// tarpitDelay after it got its turn, and wrong ones are answered 429 with Retry-After. So once over
// budget an address guesses at most one token per tarpitDelay (≤ ~1 wrong guess per second after the
// first 10), however many requests it sends at once, and the 429-versus-200 difference tells it no more
// than that. Requests beyond tarpitQueue waiting behind the one being checked get 429 at once, their
// token unchecked: during a concurrent flood from the owner's own address (one NAT, one proxy, or
// 127.0.0.1 for everyone on the host) the owner may have to retry, since nothing tells the two apart.
// The slowing ends wrongTokenEvery after the address's last wrong token.
//
// Other addresses are never refused or slowed for its failures, and a browser logged in to the console
// (its cookie is 256 bits, not something to guess) is not a token check at all.
//
// The client address is the TCP peer, never X-Forwarded-For (any client can write that). Behind a
// reverse proxy every client is the proxy's address; the budget then guards the proxy's clients
// together.
const (
	wrongTokenBurst = 10
	wrongTokenEvery = time.Minute
	tarpitDelay     = time.Second
	tarpitQueue     = 4
	// throttledAddresses bounds memory (about 200 bytes each). When that many addresses are all still
	// paying off wrong tokens, every other address shares one budget (and one tarpit): a guesser with
	// more addresses than this slows new clients, not the checks from addresses already tracked.
	throttledAddresses = 10000
)

// throttle is a budget of wrong tokens per client address (a generic cell rate algorithm: each
// address keeps the time by which all its wrong tokens are forgiven) with a tarpit for the addresses
// over it.
type throttle struct {
	burst int
	every time.Duration
	delay time.Duration // the tarpit: the shortest time a check over budget takes
	queue int           // checks over budget that may wait behind the running one, per address
	max   int
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu       sync.Mutex
	clients  map[string]*client
	overflow client // shared by the addresses that found the map full
}

// client is one address's budget and tarpit.
type client struct {
	paidOff time.Time     // when its wrong tokens are all forgiven
	lane    chan struct{} // holds the one check over budget that runs; made on first use
	waiting int           // checks over budget waiting for the lane or holding it
	checks  int           // checks in progress: a client in use is never forgotten
}

func newThrottle() *throttle {
	return &throttle{burst: wrongTokenBurst, every: wrongTokenEvery, delay: tarpitDelay, queue: tarpitQueue,
		max: throttledAddresses, now: time.Now, sleep: sleepCtx, clients: map[string]*client{}}
}

// sleepCtx waits d, or less when ctx ends first (then it returns ctx's error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Check runs one token check for r's client. right reports whether r's token is the operator's; Check
// calls it at most once, and over budget only after the tarpit (or never, when the client's queue is
// full or it goes away). ok means the token was right. Otherwise retry is 0 for a wrong token from a
// client within its budget (answer 401), and for the rest the time until the client's checks are no
// longer slowed, at least a second (answer 429 with it as Retry-After).
func (t *throttle) Check(r *http.Request, right func() bool) (ok bool, retry time.Duration) {
	key := clientAddress(r)
	t.mu.Lock()
	now := t.now()
	c := t.client(key, now)
	c.checks++
	if !t.over(c, now) {
		// Charged before the check and refunded when it was right, so concurrent checks cannot all
		// spend the same last unit of budget.
		c.paidOff = owing(c.paidOff, now, t.every)
		t.mu.Unlock()
		ok = right()
		t.mu.Lock()
		defer t.mu.Unlock()
		if ok {
			c.paidOff = c.paidOff.Add(-t.every)
		}
		t.done(key, c)
		return ok, 0
	}
	if c.waiting > t.queue {
		retry = t.slowedFor(c, now)
		t.done(key, c)
		t.mu.Unlock()
		return false, retry
	}
	c.waiting++
	if c.lane == nil {
		c.lane = make(chan struct{}, 1)
	}
	lane := c.lane
	t.mu.Unlock()

	ok, checked := t.tarpit(r.Context(), lane, right)

	t.mu.Lock()
	defer t.mu.Unlock()
	c.waiting--
	now = t.now()
	if checked && !ok {
		// Over budget a wrong token refills the debt to a full budget, no further: the slowing ends
		// one interval after the last wrong token, and the owner of a busy address waits no longer.
		c.paidOff = now.Add(time.Duration(t.burst) * t.every)
	}
	retry = t.slowedFor(c, now)
	t.done(key, c)
	if ok {
		return true, 0
	}
	return false, retry
}

// tarpit takes the lane, waits out the delay and runs the check. A client that goes away before it is
// checked frees its place at once and is not checked: its answer would reach no one (or, for a client
// that only closed its sending side, might).
func (t *throttle) tarpit(ctx context.Context, lane chan struct{}, right func() bool) (ok, checked bool) {
	select {
	case lane <- struct{}{}:
	case <-ctx.Done():
		return false, false
	}
	defer func() { <-lane }()
	if t.sleep(ctx, t.delay) != nil {
		return false, false
	}
	return right(), true
}

// client is key's budget, made when needed; with the map full, the shared overflow one. t.mu is held.
func (t *throttle) client(key string, now time.Time) *client {
	if c, ok := t.clients[key]; ok {
		return c
	}
	if len(t.clients) >= t.max {
		t.forget(now)
	}
	if len(t.clients) >= t.max {
		return &t.overflow
	}
	c := &client{}
	t.clients[key] = c
	return c
}

// over reports whether c has used up its budget: one more wrong token would be more than burst owed.
func (t *throttle) over(c *client, now time.Time) bool {
	return c.paidOff.After(now) && c.paidOff.Sub(now) > time.Duration(t.burst-1)*t.every
}

// slowedFor is how long c's checks stay slowed if it sends no more wrong tokens: at least a second, as
// a Retry-After.
func (t *throttle) slowedFor(c *client, now time.Time) time.Duration {
	d := time.Duration(0)
	if t.over(c, now) {
		d = c.paidOff.Sub(now) - time.Duration(t.burst-1)*t.every
	}
	return max(d, time.Second)
}

// done ends one check of c; a client that owes nothing and is not in use is forgotten. t.mu is held.
func (t *throttle) done(key string, c *client) {
	c.checks--
	if c != &t.overflow && c.checks == 0 && !c.paidOff.After(t.now()) {
		delete(t.clients, key)
	}
}

// owing adds one wrong token to a debt that is paid off at at.
func owing(at, now time.Time, every time.Duration) time.Time {
	if at.Before(now) {
		at = now
	}
	return at.Add(every)
}

// forget drops the addresses that owe nothing any more and are not being checked. It runs only when the
// map is full, so it costs one pass over it per new address during an attack from more addresses than it
// holds, and nothing otherwise.
func (t *throttle) forget(now time.Time) {
	for k, c := range t.clients {
		if c.checks == 0 && !c.paidOff.After(now) {
			delete(t.clients, k)
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
