package scanner_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/scanner"
)

// TestCheckLimits probes real clamds: one with the project's config, one with a small StreamMaxLength
// and AlertExceedsMax off.
func TestCheckLimits(t *testing.T) {
	t.Parallel()
	t.Run("project config", func(t *testing.T) {
		t.Parallel()
		c := testenv.StartClamd(t) // deploy/clamav/clamd.conf: StreamMaxLength 512M, AlertExceedsMax yes
		s := newScanner(t, c.Addr, nil)
		ctx := testCtx(t, 30*time.Second)
		start := time.Now()
		if err := s.CheckLimits(ctx, scanner.DefaultMaxStreamBytes); err != nil {
			t.Fatalf("CheckLimits(500 MiB): %v", err)
		}
		t.Logf("CheckLimits took %s", time.Since(start).Round(time.Microsecond))
		if err := s.CheckLimits(ctx, 512<<20); err != nil {
			t.Errorf("CheckLimits(512 MiB), exactly StreamMaxLength: %v", err)
		}
		err := s.CheckLimits(ctx, 512<<20+1)
		if !scanner.IsMisconfigured(err) || !strings.Contains(err.Error(), "set StreamMaxLength in clamd.conf to at least 536870913") {
			t.Errorf("CheckLimits(512 MiB + 1): %v, want a StreamMaxLength misconfiguration", err)
		}
		// The probes leave nothing behind in clamd: a real scan still works.
		v, err := scanBytes(ctx, s, []byte(testenv.EICAR))
		requireInfected(t, v, err)
	})
	t.Run("small stream limit, no alerts", func(t *testing.T) {
		t.Parallel()
		c := testenv.StartClamdWith(t, map[string]string{"StreamMaxLength": "1M", "AlertExceedsMax": "no"})
		s := newScanner(t, c.Addr, nil)
		ctx := testCtx(t, 30*time.Second)
		err := s.CheckLimits(ctx, 1<<20+1)
		if !scanner.IsMisconfigured(err) || !strings.Contains(err.Error(), "clamd refuses streams of 1048577 bytes") {
			t.Errorf("CheckLimits(1 MiB + 1): %v, want a StreamMaxLength misconfiguration", err)
		}
		// 1 MiB passes the stream check and fails on AlertExceedsMax.
		err = s.CheckLimits(ctx, 1<<20)
		if !scanner.IsMisconfigured(err) || !strings.Contains(err.Error(), "set AlertExceedsMax yes") {
			t.Errorf("CheckLimits(1 MiB): %v, want an AlertExceedsMax misconfiguration", err)
		}
		if scanner.IsRefused(err) {
			t.Errorf("a misconfiguration must not read as a refused input: %v", err)
		}
	})
	t.Run("clamd down", func(t *testing.T) {
		t.Parallel()
		addr := "tcp://" + testenv.FreeAddr(t) // nothing listens there
		if err := newScanner(t, addr, nil).CheckLimits(testCtx(t, 10*time.Second), 1<<20); !scanner.IsUnavailable(err) {
			t.Errorf("CheckLimits against a closed port: %v, want unavailable", err)
		}
	})
	t.Run("a daemon that answers an unfinished stream", func(t *testing.T) {
		t.Parallel()
		f := startFake(t, func(c net.Conn) {
			if cmd, err := readCommand(c); err != nil || cmd != "zINSTREAM" {
				return
			}
			io.ReadAll(c)
			io.WriteString(c, "stream: OK\x00")
		})
		err := fastScanner(t, f.Addr).CheckLimits(testCtx(t, 10*time.Second), 1<<20)
		var se *scanner.Error
		if !errors.As(err, &se) || se.Kind != scanner.Protocol {
			t.Errorf("got %v, want a protocol error", err)
		}
	})
	t.Run("cap out of range", func(t *testing.T) {
		t.Parallel()
		s := newScanner(t, "tcp://127.0.0.1:1", nil)
		for _, n := range []int64{0, 4 << 30} {
			if err := s.CheckLimits(context.Background(), n); !scanner.IsMisconfigured(err) {
				t.Errorf("CheckLimits(%d): %v", n, err)
			}
		}
	})
}

// TestScanLeavesNoConnections runs every kind of scan outcome against a real clamd and then checks
// that no socket to clamd is left open in this process (goroutines are checked by TestMain).
func TestScanLeavesNoConnections(t *testing.T) {
	t.Parallel()
	c := testenv.StartClamd(t)
	s := newScanner(t, c.Addr, func(cfg *scanner.Config) { cfg.MaxStreamBytes = 1 << 20 })
	ctx := testCtx(t, 60*time.Second)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(c.Addr, "tcp://"))

	for range 3 {
		if v, err := scanBytes(ctx, s, []byte("clean")); err != nil || v.Infected {
			t.Fatalf("clean: %+v %v", v, err)
		}
		v, err := scanBytes(ctx, s, []byte(testenv.EICAR))
		requireInfected(t, v, err)
		_, err = scanBytes(ctx, s, make([]byte, 2<<20))
		requireKind(t, scanner.Verdict{}, err, scanner.LimitExceeded)
		_, err = s.Scan(ctx, &failingReader{r: bytes.NewReader(make([]byte, 1000)), err: errors.New("connection reset")}, 5000)
		requireKind(t, scanner.Verdict{}, err, scanner.Truncated)
		_, err = s.Scan(ctx, bytes.NewReader(make([]byte, 10)), 20)
		requireKind(t, scanner.Verdict{}, err, scanner.Truncated)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = scanBytes(cctx, s, []byte("x"))
		requireKind(t, scanner.Verdict{}, err, scanner.Canceled)
		if err := s.CheckLimits(ctx, 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := s.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := socketsTo(t, port); n > 0 {
			return errors.New(strconv.Itoa(n) + " sockets to clamd are still open")
		}
		return nil
	})
}

// socketsTo counts this process's open TCP sockets whose remote port is port.
func socketsTo(t *testing.T, port string) int {
	t.Helper()
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{} // socket inodes held by our fds
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			ours[strings.TrimSuffix(inode, "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			// remote address is HEXIP:HEXPORT; the inode is the tenth field.
			_, remotePort, _ := strings.Cut(f[2], ":")
			b, err := hex.DecodeString(remotePort)
			if err != nil || len(b) != 2 || int(b[0])<<8|int(b[1]) != p {
				continue
			}
			if ours[f[9]] {
				n++
			}
		}
	}
	return n
}
