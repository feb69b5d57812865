package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/scanner"
)

func scannerFor(t *testing.T, c *testenv.Clamd) *scanner.Scanner {
	t.Helper()
	cfg := scanner.DefaultConfig()
	cfg.Addr = c.Addr
	s, err := scanner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSignatureFreshness judges a real clamd's databases: the dev one (not judged), a fresh official
// one, a stale one, and a stale one with the check turned off.
func TestSignatureFreshness(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartClamd(t)
	dev := newSignatureWatch(scannerFor(t, c), 72*time.Hour)
	if err := dev.check(ctx); err != nil {
		t.Fatalf("dev database: %v, want it not judged", err)
	}
	if h := dev.health(ctx); !h.DevDatabase || h.SignatureVersion != 0 || h.Stale {
		t.Fatalf("dev database health = %+v", h)
	}

	// clamd prints the build time in its own zone; the margins below allow for any zone's offset.
	testenv.InstallDailyDatabase(c, 27501, time.Now().Add(-5*time.Hour))
	fresh := newSignatureWatch(scannerFor(t, c), 72*time.Hour)
	if err := fresh.check(ctx); err != nil {
		t.Fatalf("5-hour-old signatures: %v", err)
	}
	if age := fresh.ageSeconds(); age < 0 || age > 20*3600 {
		t.Fatalf("age metric = %v, want about 18000", age)
	}

	testenv.InstallDailyDatabase(c, 27400, time.Now().Add(-100*time.Hour))
	stale := newSignatureWatch(scannerFor(t, c), 72*time.Hour)
	err := stale.check(ctx)
	if err == nil || !strings.Contains(err.Error(), "over the maximum age of 72h") || !strings.Contains(err.Error(), "(clamd.max_signature_age)") || !strings.Contains(err.Error(), "freshclam") {
		t.Fatalf("100-hour-old signatures: %v, want a readiness error naming the setting and freshclam", err)
	}
	if h := stale.health(ctx); !h.Stale || h.SignatureVersion != 27400 || h.SignatureAgeSeconds < 86*3600 {
		t.Fatalf("stale health = %+v", h)
	}
	off := newSignatureWatch(scannerFor(t, c), 0)
	if err := off.check(ctx); err != nil {
		t.Fatalf("check turned off: %v", err)
	}
}
