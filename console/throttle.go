package console

import (
	"sync"
	"time"
)

// Wrong tokens allowed per window, across all clients: enough for an operator's typos, far too few to
// guess a token. Past it, token checks answer 429 until the window has moved on. An attacker can delay
// new logins for as long as it keeps guessing, but cannot get in, and a browser already logged in keeps
// working.
const (
	maxWrongTokens   = 10
	wrongTokenWindow = time.Minute
)

// throttle counts recent wrong tokens.
type throttle struct {
	mu    sync.Mutex
	fails []time.Time
	now   func() time.Time
}

func newThrottle() *throttle { return &throttle{now: time.Now} }

// blocked reports whether token checks are suspended now.
func (t *throttle) blocked() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prune()
	return len(t.fails) >= maxWrongTokens
}

// fail records a wrong token.
func (t *throttle) fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prune()
	t.fails = append(t.fails, t.now())
}

func (t *throttle) prune() {
	cut := t.now().Add(-wrongTokenWindow)
	i := 0
	for i < len(t.fails) && t.fails[i].Before(cut) {
		i++
	}
	t.fails = t.fails[i:]
}
