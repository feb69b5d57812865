package scanner_test

// Faults a real clamd does not produce on demand (a stalled daemon, garbage replies) are played by a
// loopback listener that speaks just enough of the protocol.

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clamd "github.com/dutchcoders/go-clamd"

	"github.com/mediaworker/mediaworker/scanner"
)

// fakeClamd accepts loopback connections and hands each to handle. Everything it starts ends when the
// test does.
type fakeClamd struct {
	Addr     string
	accepted atomic.Int64
	// Quit is closed when the test ends; handlers that play a hung daemon wait on it.
	Quit  chan struct{}
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startFake(t *testing.T, handle func(net.Conn)) *fakeClamd {
	t.Helper()
	return startFakeOn(t, "tcp", "127.0.0.1:0", handle)
}

// startFakeOn is startFake on the given network ("tcp" or "unix") and address.
func startFakeOn(t *testing.T, network, address string, handle func(net.Conn)) *fakeClamd {
	t.Helper()
	ln, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeClamd{Addr: network + "://" + ln.Addr().String(), ln: ln, Quit: make(chan struct{})}
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepted.Add(1)
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			f.wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		close(f.Quit)
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

// readCommand reads one command, NUL-terminated (z prefix) or newline-terminated (n prefix, go-clamd).
func readCommand(c net.Conn) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := c.Read(one); err != nil {
			return string(b), err
		}
		if one[0] == 0 || one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
}

// readStream reads INSTREAM chunks up to the terminating zero-length chunk and returns the byte count.
func readStream(c net.Conn) (int64, error) {
	var total int64
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return total, err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 {
			return total, nil
		}
		if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
			return total, err
		}
		total += int64(n)
	}
}

// replyAfterStream is a clamd that reads the whole stream and then sends reply verbatim.
func replyAfterStream(reply string) func(net.Conn) {
	return func(c net.Conn) {
		if cmd, err := readCommand(c); err != nil || cmd != "zINSTREAM" {
			return
		}
		if _, err := readStream(c); err != nil {
			return
		}
		io.WriteString(c, reply)
	}
}

func fastScanner(t *testing.T, addr string) *scanner.Scanner {
	return newScanner(t, addr, func(c *scanner.Config) {
		c.DialTimeout = time.Second
		c.IOTimeout = 300 * time.Millisecond
		c.ScanTimeout = 300 * time.Millisecond
	})
}

func TestScanRefusesOversizedInputBeforeConnecting(t *testing.T) {
	f := startFake(t, replyAfterStream("stream: OK\x00"))
	s := newScanner(t, f.Addr, func(c *scanner.Config) { c.MaxStreamBytes = 1 << 20 })
	ctx := testCtx(t, 10*time.Second)

	v, err := s.Scan(ctx, zeroes{}, 1<<20+1)
	requireKind(t, v, err, scanner.LimitExceeded)
	if !scanner.IsRefused(err) {
		t.Fatalf("IsRefused(%v) = false", err)
	}
	// Exactly the limit is fine, and it is the only connection.
	v, err = s.Scan(ctx, io.LimitReader(zeroes{}, 1<<20), 1<<20)
	requireClean(t, v, err)
	if n := f.accepted.Load(); n != 1 {
		t.Fatalf("fake clamd accepted %d connections, want 1 (the oversized input must not connect)", n)
	}
}

func TestScanReplyFaults(t *testing.T) {
	tests := []struct {
		name  string
		reply string
		kind  scanner.Kind
	}{
		{"no NUL terminator", "stream: OK", scanner.Protocol},
		{"newline instead of NUL", "stream: OK\n", scanner.Protocol},
		{"closed without reply", "", scanner.Unavailable},
		{"garbage", "PONG\x00", scanner.Protocol},
		{"clamd error", "stream: Can't create temporary file ERROR\x00", scanner.Protocol},
		{"oversized reply", strings.Repeat("A", 10000), scanner.Protocol},
		{"limits heuristic", "stream: Heuristics.Limits.Exceeded.MaxScanSize FOUND\x00", scanner.LimitExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, replyAfterStream(tt.reply))
			s := fastScanner(t, f.Addr)
			v, err := scanBytes(testCtx(t, 10*time.Second), s, []byte("some input"))
			requireKind(t, v, err, tt.kind)
		})
	}
}

func TestScanEarlyReplyIsNotAVerdict(t *testing.T) {
	// A daemon that answers OK at once and stops reading: whatever happens, no clean verdict.
	f := startFake(t, func(c net.Conn) {
		readCommand(c)
		io.WriteString(c, "stream: OK\x00")
	})
	s := fastScanner(t, f.Addr)
	v, err := s.Scan(testCtx(t, 10*time.Second), io.LimitReader(zeroes{}, 32<<20), 32<<20)
	if err == nil {
		t.Fatalf("scan = %+v, nil; a reply before the end of the stream is not a verdict", v)
	}
	if scanner.IsRefused(err) {
		t.Fatalf("scan error %v classified as a refusal", err)
	}
	t.Logf("as expected: %v", err)
}

func TestScanDeadlines(t *testing.T) {
	t.Run("daemon stops reading", func(t *testing.T) {
		// Accepts the command, then stops reading: the writes fill the socket buffers and must time out.
		var f *fakeClamd
		f = startFake(t, func(c net.Conn) {
			readCommand(c)
			io.Copy(io.Discard, io.LimitReader(c, 1<<20))
			<-f.Quit
		})
		start := time.Now()
		v, err := fastScanner(t, f.Addr).Scan(testCtx(t, 10*time.Second), io.LimitReader(zeroes{}, 256<<20), 256<<20)
		requireKind(t, v, err, scanner.Unavailable)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stalled daemon: %v, want the write deadline to fire", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("stalled write took %s to fail", d)
		}
	})

	t.Run("daemon never answers", func(t *testing.T) {
		// Reads everything, replies nothing and keeps the connection open, like a hung scan.
		f2 := startFake(t, func(c net.Conn) {
			readCommand(c)
			readStream(c)
			c.Read(make([]byte, 1))
		})
		start := time.Now()
		v, err := fastScanner(t, f2.Addr).Scan(testCtx(t, 10*time.Second), strings.NewReader("x"), 1)
		requireKind(t, v, err, scanner.Unavailable)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("waiting for the verdict took %s to fail", d)
		}
		if err := fastScanner(t, f2.Addr).Ping(testCtx(t, 10*time.Second)); !scanner.IsUnavailable(err) {
			t.Fatalf("ping of a silent daemon: %v, want unavailable", err)
		}
	})

	t.Run("cancel while waiting for the verdict", func(t *testing.T) {
		streamed := make(chan struct{})
		f := startFake(t, func(c net.Conn) {
			readCommand(c)
			readStream(c)
			close(streamed)
			c.Read(make([]byte, 1))
		})
		s := newScanner(t, f.Addr, nil) // default deadlines: only the cancel can end the wait
		ctx, cancel := context.WithCancel(testCtx(t, 10*time.Second))
		done := make(chan error, 1)
		go func() {
			_, err := s.Scan(ctx, strings.NewReader("input"), 5)
			done <- err
		}()
		<-streamed
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) || scanner.IsUnavailable(err) {
				t.Fatalf("canceled scan: %v, want a Canceled error", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("scan returned %s after cancel", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("scan did not return after cancel")
		}
	})
}

func TestPingAndVersionFaults(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	hangUp := startFake(t, func(c net.Conn) { readCommand(c) })
	if err := fastScanner(t, hangUp.Addr).Ping(ctx); !scanner.IsUnavailable(err) {
		t.Fatalf("ping of a daemon that hangs up: %v, want unavailable", err)
	}

	// go-clamd's Ping dereferences a nil result in the same situation (why it is not used).
	func() {
		defer func() {
			if recover() == nil {
				t.Error("go-clamd Ping no longer panics when clamd hangs up; revisit instream.go's comment")
			}
		}()
		clamd.NewClamd(hangUp.Addr).Ping()
	}()

	odd := startFake(t, func(c net.Conn) {
		cmd, _ := readCommand(c)
		io.WriteString(c, "Hello "+cmd+"\x00")
	})
	if err := fastScanner(t, odd.Addr).Ping(ctx); err == nil || scanner.IsUnavailable(err) {
		t.Fatalf("ping answered with garbage: %v, want a protocol error", err)
	}
	if v, err := fastScanner(t, odd.Addr).Version(ctx); err == nil {
		t.Fatalf("version answered with garbage: %q, want a protocol error", v)
	}

	refused := newScanner(t, "tcp://127.0.0.1:1", nil)
	if err := refused.Ping(ctx); !scanner.IsUnavailable(err) {
		t.Fatalf("ping of a closed port: %v, want unavailable", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := scanner.DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	good := []string{"tcp://127.0.0.1:3310", "tcp://[::1]:3310", "tcp://clamd:3310", "unix:///run/clamav/clamd.ctl"}
	for _, addr := range good {
		c := scanner.DefaultConfig()
		c.Addr = addr
		if err := c.Validate(); err != nil {
			t.Errorf("Addr %q: %v", addr, err)
		}
	}
	bad := []string{"", "127.0.0.1:3310", "tcp://127.0.0.1", "tcp://:3310", "udp://127.0.0.1:3310",
		"unix://run/clamd.ctl", "unix:relative", "tcp://u:p@127.0.0.1:3310", "tcp://127.0.0.1:3310/x"}
	for _, addr := range bad {
		c := scanner.DefaultConfig()
		c.Addr = addr
		if err := c.Validate(); err == nil {
			t.Errorf("Addr %q: accepted", addr)
		}
	}
	mods := map[string]func(*scanner.Config){
		"no dial timeout":  func(c *scanner.Config) { c.DialTimeout = 0 },
		"no io timeout":    func(c *scanner.Config) { c.IOTimeout = -1 },
		"no scan timeout":  func(c *scanner.Config) { c.ScanTimeout = 0 },
		"zero chunk":       func(c *scanner.Config) { c.ChunkSize = 0 },
		"huge chunk":       func(c *scanner.Config) { c.ChunkSize = 1 << 30 },
		"no max":           func(c *scanner.Config) { c.MaxStreamBytes = 0 },
		"max beyond clamd": func(c *scanner.Config) { c.MaxStreamBytes = 4 << 30 },
	}
	for name, mod := range mods {
		c := scanner.DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if _, err := scanner.New(c); err == nil {
			t.Errorf("%s: New accepted", name)
		}
	}
	// A 4 GB limit fits no clamd; the largest is just under it.
	c := scanner.DefaultConfig()
	c.MaxStreamBytes = 4<<30 - 1
	if err := c.Validate(); err != nil {
		t.Errorf("max 4 GiB - 1: %v", err)
	}
}
