package s3_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
)

// A server that keeps the connection open and stops sending in the middle of a body (a hung disk, a
// proxy that stops forwarding) ends a read within Timeout, as a stalled JetStream object store does,
// however far away the caller's deadline is: net/http bounds a body by nothing but the context, and
// the download of a job waited for its whole --job-timeout (30 minutes).
func TestABodyThatStopsArrivingEndsWithinTimeout(t *testing.T) {
	g := testenv.StartVersityGW(t, testenv.VersityGWOptions{})
	p := startFreezingProxy(t, g.Endpoint)
	cfg := gwConfig(g)
	cfg.Endpoint = p.addr
	cfg.Timeout = time.Second
	s := newStore(t, cfg)
	ctx := t.Context()
	if err := s.EnsureBucket(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	if err := s.Put(ctx, "media", "k", strings.NewReader(strings.Repeat("x", size)), size, "application/octet-stream"); err != nil {
		t.Fatal(err)
	}
	info, err := s.Stat(ctx, "media", "k")
	if err != nil {
		t.Fatal(err)
	}

	far, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	for name, read := range map[string]func() (int64, error){
		"Get":      func() (int64, error) { return s.Get(far, "media", "k", io.Discard) },
		"GetRange": func() (int64, error) { return objstore.GetRange(far, s, info, 1<<20, 2<<20, io.Discard) },
	} {
		p.freezeAfter(512 << 10) // the server's next 512 KiB reach us, then nothing
		done := make(chan error, 1)
		start := time.Now()
		go func() { _, err := read(); done <- err }()
		select {
		case err := <-done:
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "stalled") || objstore.IsPermanent(err) {
				t.Errorf("%s of a body that stopped arriving = %v, want a transient stall", name, err)
			}
			if took > 10*time.Second {
				t.Errorf("%s of a body that stopped arriving took %s, want about Timeout (%s)", name, took, cfg.Timeout)
			}
			t.Logf("%s: %v after %s", name, err, took.Round(time.Millisecond))
		case <-time.After(60 * time.Second):
			t.Fatalf("%s still waiting 60 s after the body stopped arriving: bounded by the caller's hour, not Timeout", name)
		}
		p.thaw()
	}
	// Thawed, the store reads as before: the stall left nothing behind.
	if n, err := s.Get(ctx, "media", "k", io.Discard); err != nil || n != size {
		t.Errorf("Get after the stall = %d, %v", n, err)
	}
}

// freezingProxy forwards loopback TCP to an S3 server and can stop passing the server's bytes on
// while keeping every connection open.
type freezingProxy struct {
	addr   string
	budget atomic.Int64 // server bytes still passed on while frozen; -1: not frozen
	mu     sync.Mutex
	thawed chan struct{}
}

func startFreezingProxy(t *testing.T, target string) *freezingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{addr: l.Addr().String(), thawed: make(chan struct{})}
	p.budget.Store(-1)
	var conns sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); p.thaw(); conns.Wait() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			conns.Add(2)
			go func() { defer conns.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer conns.Done(); p.down(c, up); _ = c.Close() }()
		}
	}()
	return p
}

// down passes the server's bytes to the client, holding them while frozen and out of budget.
func (p *freezingProxy) down(c, up net.Conn) {
	buf := make([]byte, 16<<10)
	for {
		n, err := up.Read(buf)
		for sent := 0; sent < n; {
			chunk := n - sent
			if b := p.budget.Load(); b >= 0 {
				if b == 0 {
					p.mu.Lock()
					thawed := p.thawed
					p.mu.Unlock()
					<-thawed
					continue
				}
				chunk = int(min(int64(chunk), b))
				p.budget.Add(-int64(chunk))
			}
			if _, werr := c.Write(buf[sent : sent+chunk]); werr != nil {
				return
			}
			sent += chunk
		}
		if err != nil {
			return
		}
	}
}

func (p *freezingProxy) freezeAfter(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.thawed = make(chan struct{})
	p.budget.Store(n)
}

func (p *freezingProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.budget.Load() >= 0 {
		p.budget.Store(-1)
		close(p.thawed)
	}
}
