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

// A server that keeps the connection open and stops reading in the middle of an upload (a hung disk,
// a proxy that stops forwarding) ends the Put within a few Timeouts, whatever the caller's deadline:
// net/http bounds the sending of a body by nothing but the context, and the upload of a job's variant
// waited for its whole --job-timeout. minio-go retries a failed part MaxRetries times, each one
// stalling in turn, and then aborts the multipart upload on the same server, waiting up to a minute of
// its own for the answer (its abortFailedUpload): a stalled single request ends in about Timeout, a
// stalled multipart upload in about a minute.
func TestAServerThatStopsTakingAnUploadEndsItWithinTimeouts(t *testing.T) {
	g := testenv.StartVersityGW(t, testenv.VersityGWOptions{})
	p := startFreezingProxy(t, g.Endpoint)
	// Bodies far larger than what loopback's socket buffers take in (up to 32 MiB here) before a
	// sender's write waits; a body that fits in them would leave only the answer to wait for.
	const size = 96 << 20
	for name, partSize := range map[string]int64{"one request": 128 << 20, "multipart": 16 << 20} {
		cfg := gwConfig(g)
		cfg.Endpoint, cfg.Timeout, cfg.PartSize = p.addr, time.Second, partSize
		s := newStore(t, cfg)
		if err := s.EnsureBucket(t.Context(), "media"); err != nil {
			t.Fatal(err)
		}
		far, cancel := context.WithTimeout(t.Context(), time.Hour)
		p.freezeUpAfter(1 << 20) // the server gets the next MiB, then nothing
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- s.Put(far, "media", "big", io.LimitReader(zeros{}, size), size, "video/mp4") }()
		select {
		case err := <-done:
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "stalled") || objstore.IsPermanent(err) {
				t.Errorf("%s: Put to a server that stopped reading = %v, want a transient stall", name, err)
			}
			limit := time.Duration(cfg.MaxRetries+1) * 5 * cfg.Timeout
			if partSize < size {
				limit += time.Minute // the abort
			}
			if took > limit {
				t.Errorf("%s: Put to a server that stopped reading took %s, want at most %s", name, took, limit)
			}
			t.Logf("%s: %v after %s", name, err, took.Round(time.Millisecond))
		case <-time.After(150 * time.Second):
			t.Fatalf("%s: Put still waiting 150 s after the server stopped reading: bounded by the caller's hour, not Timeout", name)
		}
		cancel()
		p.thaw()
		// Thawed, the store writes as before.
		if err := s.Put(t.Context(), "media", "small", strings.NewReader("x"), 1, "text/plain"); err != nil {
			t.Errorf("%s: Put after the stall: %v", name, err)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// freezingProxy forwards loopback TCP to an S3 server and can stop passing bytes on, the server's to
// the client or the client's to the server, while keeping every connection open.
type freezingProxy struct {
	addr string
	// Bytes still passed on while frozen, from the server (down) and to it (up); -1: not frozen.
	down, up atomic.Int64
	mu       sync.Mutex
	thawed   chan struct{}
}

func startFreezingProxy(t *testing.T, target string) *freezingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{addr: l.Addr().String(), thawed: make(chan struct{})}
	p.down.Store(-1)
	p.up.Store(-1)
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
			go func() { defer conns.Done(); p.pass(up, c, &p.up); _ = up.Close() }()
			go func() { defer conns.Done(); p.pass(c, up, &p.down); _ = c.Close() }()
		}
	}()
	return p
}

// pass copies src to dst, holding the bytes while frozen and out of budget. Holding them, it stops
// reading src: the sender's socket buffers fill and its writes wait.
func (p *freezingProxy) pass(dst, src net.Conn, budget *atomic.Int64) {
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		for sent := 0; sent < n; {
			chunk := n - sent
			if b := budget.Load(); b >= 0 {
				if b == 0 {
					p.mu.Lock()
					thawed := p.thawed
					p.mu.Unlock()
					<-thawed
					continue
				}
				chunk = int(min(int64(chunk), b))
				budget.Add(-int64(chunk))
			}
			if _, werr := dst.Write(buf[sent : sent+chunk]); werr != nil {
				return
			}
			sent += chunk
		}
		if err != nil {
			return
		}
	}
}

// freezeAfter lets n more bytes of the server's through, then none until thaw.
func (p *freezingProxy) freezeAfter(n int64) { p.freeze(&p.down, n) }

// freezeUpAfter lets n more bytes of the client's through, then none until thaw.
func (p *freezingProxy) freezeUpAfter(n int64) { p.freeze(&p.up, n) }

func (p *freezingProxy) freeze(budget *atomic.Int64, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down.Load() < 0 && p.up.Load() < 0 {
		p.thawed = make(chan struct{})
	}
	budget.Store(n)
}

func (p *freezingProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down.Load() >= 0 || p.up.Load() >= 0 {
		p.down.Store(-1)
		p.up.Store(-1)
		close(p.thawed)
	}
}
