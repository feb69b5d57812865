package vips

import (
	"runtime"
	"sync"
)

// Cores lends the cores no image job is using to the jobs that run, for work a job can split (issue
// 37): libvips runs each operation on one thread (Concurrency), so a job alone on a 2-core machine
// used one core while the other idled, and a burst that the memory budget held to one job at a time
// ran at half the machine. A job holds one core while it runs (Enter); a part of it that can run
// beside the rest (the encode of a smaller variant) borrows another with Borrow, only when fewer
// cores are held than the process may use (GOMAXPROCS, which follows the container's CPU limit), and
// returns it as soon as that part is done. A job that starts while cores are lent does not wait: the
// lent cores come back within one encode, and no new one is lent while every core is held. The pool
// counts image jobs only; ffmpeg's threads are the video lane's and are not counted here.
type Cores struct {
	mu   sync.Mutex
	held int // jobs that have entered and not left, plus cores lent
	max  func() int
}

// cores is the process's pool: libvips' threads are the process's, whoever starts them.
var cores = &Cores{max: func() int { return runtime.GOMAXPROCS(0) }}

// Enter counts a job as running until the returned leave is called (once).
func Enter() (leave func()) { return cores.Enter() }

// Borrow lends an idle core for one part of a job; the caller calls Return after that part.
func Borrow() bool { return cores.Borrow() }

// Return gives back a core Borrow lent.
func Return() { cores.Return() }

// Enter counts a job as running until the returned leave is called; leave is idempotent.
func (c *Cores) Enter() (leave func()) {
	c.mu.Lock()
	c.held++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.held--
			c.mu.Unlock()
		})
	}
}

// Borrow lends a core when fewer than max are held.
func (c *Cores) Borrow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held >= c.max() {
		return false
	}
	c.held++
	return true
}

// Return gives back a lent core.
func (c *Cores) Return() {
	c.mu.Lock()
	c.held--
	c.mu.Unlock()
}
