package faults

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// s3Proxy sits between the worker and the S3 server on loopback and can lose the reply to a DELETE: it
// forwards the request, waits until the server answers (so the object really is gone), then drops the
// connection instead of relaying the answer, and refuses every connection until heal. That is what a
// store crash or a network cut at the worst moment looks like to the worker, made deterministic.
type s3Proxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu    sync.Mutex
	armed bool // the next DELETE loses its reply and the proxy goes dark
	dark  bool
	// answered: the store answered the cut DELETE (and so has done it); dark goes on as the DELETE
	// passes, before the store has read it.
	answered bool
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func startS3Proxy(t *testing.T, target string) *s3Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &s3Proxy{t: t, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Endpoint is the proxy's host:port, for --s3-endpoint.
func (p *s3Proxy) Endpoint() string { return p.ln.Addr().String() }

// armCutOnDelete makes the next DELETE the last request that gets through until heal.
func (p *s3Proxy) armCutOnDelete() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = true
}

// deleteAnswered reports whether the store has answered the cut DELETE (whose reply was dropped).
func (p *s3Proxy) deleteAnswered() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered
}

func (p *s3Proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dark = false
}

func (p *s3Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *s3Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dark {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *s3Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *s3Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			client.Close() // dark: the store is unreachable
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			p.untrack(client)
			continue
		}
		p.track(server)
		var cut sync.Once
		cutCh := make(chan struct{})
		p.wg.Add(2)
		go func() { // client → server, watching for the DELETE to cut
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					chunk := buf[:n]
					p.mu.Lock()
					if p.armed && (bytes.HasPrefix(chunk, []byte("DELETE /")) || bytes.Contains(chunk, []byte("\r\n\r\nDELETE /"))) {
						p.armed, p.dark = false, true
						cut.Do(func() { close(cutCh) })
					}
					p.mu.Unlock()
					if _, werr := server.Write(chunk); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			p.untrack(server)
		}()
		go func() { // server → client, unless the reply is to be lost
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					select {
					case <-cutCh:
						// The store has answered the DELETE: it is done. The worker never hears so.
						p.mu.Lock()
						p.answered = true
						p.mu.Unlock()
						p.untrack(client)
						p.untrack(server)
						return
					default:
					}
					if _, werr := client.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			p.untrack(client)
		}()
	}
}
