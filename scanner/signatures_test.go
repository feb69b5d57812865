package scanner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/scanner"
)

func TestParseVersion(t *testing.T) {
	official, err := scanner.ParseVersion("ClamAV 1.4.6/27500/Thu Nov 20 09:30:02 2025")
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2025, 11, 20, 9, 30, 2, 0, time.UTC)
	if official.Engine != "1.4.6" || official.Version != 27500 || !official.Date.Equal(want) || official.Dev {
		t.Fatalf("official reply parsed as %+v", official)
	}
	if age := official.Age(want.Add(50 * time.Hour)); age != 50*time.Hour {
		t.Fatalf("age = %s, want 50h", age)
	}
	// ctime pads one-digit days with a space.
	if s, err := scanner.ParseVersion("ClamAV 1.0.7/27105/Mon Dec  2 04:41:57 2024"); err != nil || s.Date.Day() != 2 {
		t.Fatalf("space-padded day: %+v, %v", s, err)
	}
	dev, err := scanner.ParseVersion("ClamAV 1.4.6")
	if err != nil || !dev.Dev || dev.Engine != "1.4.6" || !dev.Date.IsZero() || dev.Age(time.Now()) != 0 {
		t.Fatalf("dev reply parsed as %+v, %v", dev, err)
	}
	for _, bad := range []string{
		"", "PONG", "ClamAV ", "ClamAV 1.4.6/", "ClamAV 1.4.6/27500", "ClamAV 1.4.6/x/Thu Nov 20 09:30:02 2025",
		"ClamAV 1.4.6/0/Thu Nov 20 09:30:02 2025", "ClamAV 1.4.6/27500/yesterday", "ClamAV 1.4.6\n/1/x",
	} {
		if s, err := scanner.ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) = %+v, want an error", bad, s)
		} else if !strings.Contains(err.Error(), "parsing clamd's version") {
			t.Errorf("ParseVersion(%q): error %q does not say what failed", bad, err)
		}
	}
}

// TestSignaturesFromClamd asks a real clamd in both shapes: with the project's dev database (no version,
// no date), then with a database in the official format, as freshclam installs them.
func TestSignaturesFromClamd(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	c := testenv.StartClamd(t)
	s := newScanner(t, c.Addr, nil)
	sig, err := s.Signatures(ctx)
	if err != nil {
		t.Fatalf("signatures of the dev clamd: %v", err)
	}
	if !sig.Dev || !strings.HasPrefix(sig.Engine, "1.") || sig.Version != 0 || !sig.Date.IsZero() {
		t.Fatalf("dev clamd's signatures = %+v, want a dev database", sig)
	}

	built := time.Date(2025, 11, 20, 9, 30, 2, 0, time.UTC)
	testenv.InstallDailyDatabase(c, 27500, built)
	sig, err = s.Signatures(ctx)
	if err != nil {
		t.Fatalf("signatures with an official-format database: %v", err)
	}
	t.Logf("clamd with a daily database: %q", sig.Reply)
	// clamd prints the date in its own time zone without naming it: allow for any zone's offset.
	if sig.Dev || sig.Version != 27500 || sig.Date.Sub(built).Abs() > 14*time.Hour {
		t.Fatalf("signatures = %+v, want version 27500 built about %s", sig, built)
	}
	// The database really is loaded: its one signature detects its test string.
	v, err := s.Scan(ctx, strings.NewReader("xx mediaworker-official-test xx"), 31)
	if err != nil || !v.Infected || !strings.HasPrefix(v.Signature, testenv.OfficialSignature) {
		t.Fatalf("scan with the daily database: %+v, %v", v, err)
	}
}
