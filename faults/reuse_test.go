package faults

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// Issue 20's judged case against the built binary: the same 12 MP photo uploaded again under a new key
// is answered "reused" in less than a quarter of the first one's time, without asking clamd (its own
// log counts the scans), with variants at the new keys that decode; after a signature reload the same
// bytes are scanned again; infected bytes seen before are answered infected and the new object removed.
// Every answer carries the asset's facts and passes both schemas (the ledger checks every event).
func TestRepeatedUploadsAreReused(t *testing.T) {
	clamd := testenv.StartClamdWith(t, map[string]string{"LogClean": "yes"})
	testenv.InstallDailyDatabase(clamd, 27000, time.Now().Add(-time.Hour))
	srv := testenv.StartNATS(t)
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, args: []string{"--no-reuse=false"}})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	photo := testenv.MakeJPEG(t, t.TempDir(), 4000, 3000)

	scans := func() int { return strings.Count(clamd.Log(), ": OK") }
	timed := func(key string) (contracts.Response, time.Duration) {
		t.Helper()
		c.upload(photo, key)
		start := time.Now()
		id := c.request(key)
		l.await([]string{id}, 2*time.Minute)
		took := time.Since(start)
		r := l.one(id)
		if !r.Success || len(r.Processed) != 3 {
			t.Fatalf("%s: %+v", key, r)
		}
		return r, took
	}

	first, firstTook := timed("u/first.jpg")
	md := first.Metadata
	if md == nil || md.Reused || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(md.SHA256) || md.ThumbHash == "" ||
		!regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(md.PHash) || !regexp.MustCompile(`^#[0-9a-f]{6}$`).MatchString(md.DominantColor) {
		t.Fatalf("first answer's metadata: %+v", md)
	}
	before := scans()
	if before < 1 {
		t.Fatalf("clamd's log shows no scan of the first upload:\n%s", clamd.Log())
	}

	again, againTook := timed("u/again.jpg")
	if again.Metadata == nil || !again.Metadata.Reused || again.Metadata.SHA256 != md.SHA256 || again.Metadata.PHash != md.PHash {
		t.Fatalf("second upload of the same bytes: metadata %+v", again.Metadata)
	}
	if n := scans(); n != before {
		t.Errorf("clamd scanned %d more time(s) for the reused upload", n-before)
	}
	if againTook*4 >= firstTook {
		t.Errorf("the reused answer took %s, the first %s: want less than a quarter", againTook, firstTook)
	}
	t.Logf("first answer in %s, reused in %s (%.1f×)", firstTook, againTook, float64(firstTook)/float64(againTook))
	for i, v := range again.Processed {
		key := keyOf(t, v.URL)
		if !strings.Contains(key, again.MediaID) || v.Quality != first.Processed[i].Quality || v.Width != first.Processed[i].Width {
			t.Errorf("reused variant %d: %+v (first: %+v)", i, v, first.Processed[i])
		}
		img := vipsDecode(t, c.get(key), "webp")
		if b := img.Bounds(); b.Dx() != v.Width || b.Dy() != v.Height {
			t.Errorf("reused variant %s decodes at %v, the answer says %d×%d", v.Quality, b, v.Width, v.Height)
		}
	}

	// New signatures: the same bytes are scanned again.
	testenv.InstallDailyDatabase(clamd, 27001, time.Now())
	before = scans()
	fresh, _ := timed("u/after-reload.jpg")
	if fresh.Metadata == nil || fresh.Metadata.Reused {
		t.Errorf("after a signature reload the same bytes were reused: %+v", fresh.Metadata)
	}
	if scans() != before+1 {
		t.Errorf("clamd scanned %d time(s) after its reload, want 1:\n%s", scans()-before, clamd.Log())
	}

	// Infected bytes seen before: answered infected again, the new object removed, clamd not asked.
	eicar := filepath.Join(t.TempDir(), "eicar.txt")
	if err := os.WriteFile(eicar, []byte(testenv.EICAR), 0o600); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, key := range []string{"u/e1.txt", "u/e2.txt"} {
		c.upload(eicar, key)
		id := c.request(key)
		l.await([]string{id}, time.Minute)
		ids = append(ids, id)
		if key == "u/e1.txt" {
			before = strings.Count(clamd.Log(), "FOUND")
		}
	}
	if n := strings.Count(clamd.Log(), "FOUND"); n != before {
		t.Errorf("clamd was asked about the second EICAR upload (%d more FOUND)", n-before)
	}
	for i, id := range ids {
		r := l.one(id)
		if r.Success || !strings.Contains(r.Error, "virus detected: "+testenv.EICARSignature) || len(l.viruses[id]) != 1 {
			t.Errorf("EICAR upload %d: %+v, %d virus events", i+1, r, len(l.viruses[id]))
		}
	}
	if c.exists("u/e2.txt") {
		t.Error("the second infected upload is still in the bucket")
	}
}
