package vips

import "testing"

// A job alone may borrow every other core, one more job takes one back, and nothing is lent while
// every core is held; leave is idempotent.
func TestCoresLendsOnlyIdleCores(t *testing.T) {
	c := &Cores{max: func() int { return 2 }}
	leave := c.Enter()
	if !c.Borrow() {
		t.Fatal("a job alone on 2 cores could not borrow the idle one")
	}
	if c.Borrow() {
		t.Fatal("a third core was lent on 2 cores")
	}
	leave2 := c.Enter() // another job arrives while the core is lent: it runs, nothing more is lent
	c.Return()
	if c.Borrow() {
		t.Fatal("a core was lent while two jobs held both")
	}
	leave2()
	leave2()
	if !c.Borrow() {
		t.Fatal("the second job's core was not given back when it left (or leave is not idempotent)")
	}
	c.Return()
	leave()
	if c.held != 0 {
		t.Fatalf("held = %d after every job left, want 0", c.held)
	}
}

// A still's decode gets a second libvips thread only on an idle core, and the count is back to one
// when it is done; while every core is held it stays one.
func TestDecodeThreadsOnlyOnIdleCores(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	saved := cores
	t.Cleanup(func() { cores = saved })
	cores = &Cores{max: func() int { return 2 }}
	leave := Enter()
	done := withThreads()
	if got := threads(); got != 2 {
		t.Errorf("a decode alone on 2 cores runs %d libvips threads, want 2", got)
	}
	if cores.Borrow() {
		t.Error("the decode's borrowed core was lent again")
	}
	done()
	if got := threads(); got != 1 {
		t.Errorf("after the widened decode: %d libvips threads, want 1", got)
	}
	leave2 := Enter() // two jobs on two cores: nothing idle
	done = withThreads()
	if got := threads(); got != 1 {
		t.Errorf("a decode beside another job on 2 cores runs %d libvips threads, want 1", got)
	}
	done()
	leave2()
	leave()
	if cores.held != 0 {
		t.Fatalf("held = %d after every job left, want 0", cores.held)
	}
}
