package app

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/scanner"
)

// versionServer plays a clamd with official databases built at built; it answers VERSION only (the
// real clamd in the other tests has only the dev database, which has no date).
func versionServer(t *testing.T, built time.Time) *scanner.Scanner {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 64)
			n, _ := c.Read(buf)
			if strings.HasPrefix(string(buf[:n]), "zVERSION") {
				c.Write([]byte("ClamAV 1.4.6/27500/" + built.UTC().Format(time.ANSIC) + "\x00"))
			}
			c.Close()
		}
	}()
	cfg := scanner.DefaultConfig()
	cfg.Addr = "tcp://" + ln.Addr().String()
	s, err := scanner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSignatureFreshness(t *testing.T) {
	ctx := context.Background()
	fresh := newSignatureWatch(versionServer(t, time.Now().Add(-5*time.Hour)), 72*time.Hour)
	if err := fresh.check(ctx); err != nil {
		t.Fatalf("5-hour-old signatures: %v", err)
	}
	if age := fresh.ageSeconds(); math.Abs(age-5*3600) > 120 {
		t.Fatalf("age metric = %v, want about 18000", age)
	}

	stale := newSignatureWatch(versionServer(t, time.Now().Add(-100*time.Hour)), 72*time.Hour)
	err := stale.check(ctx)
	if err == nil || !strings.Contains(err.Error(), "--max-signature-age 72h") || !strings.Contains(err.Error(), "freshclam") {
		t.Fatalf("100-hour-old signatures: %v, want a readiness error naming the setting and freshclam", err)
	}
	if h := stale.health(ctx); !h.Stale || h.SignatureVersion != 27500 || h.SignatureAgeSeconds < 99*3600 {
		t.Fatalf("stale health = %+v", h)
	}

	off := newSignatureWatch(versionServer(t, time.Now().Add(-100*time.Hour)), 0)
	if err := off.check(ctx); err != nil {
		t.Fatalf("check turned off: %v", err)
	}
}
