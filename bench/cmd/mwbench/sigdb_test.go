package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/scanner"
)

// TestSigDBLoadsAndMatches: a small set made by the benchmark's generator loads into a real clamd
// without errors, and clamd detects both canaries with it (the hash and the body signature, whose
// pattern has wildcards), while random bytes stay clean: the set is live, not ignored.
func TestSigDBLoadsAndMatches(t *testing.T) {
	db, err := ensureSigDB(t.TempDir(), sigCounts{md5: 3000, sha256: 2000, body: 1500, logical: 500})
	if err != nil {
		t.Fatal(err)
	}
	if db.Signatures != 3000+2000+1500+500+2 {
		t.Errorf("%d signatures written", db.Signatures)
	}
	c, err := startClamdWithDB(t, nil, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clamd log:\n%s", c.Log())
	cfg := scanner.DefaultConfig()
	cfg.Addr = c.Addr
	s, err := scanner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clean := filepath.Join(t.TempDir(), "clean.bin")
	testenv.MakeRandomFile(t, clean, 1<<20)
	for file, want := range map[string]string{db.HashCanary: db.HashCanaryName + ".UNOFFICIAL", db.BodyCanary: db.BodyCanaryName + ".UNOFFICIAL", clean: ""} {
		v, err := s.ScanFile(context.Background(), file)
		if err != nil {
			t.Fatalf("scanning %s: %v", filepath.Base(file), err)
		}
		if v.Infected != (want != "") || v.Signature != want {
			t.Errorf("%s: infected %v signature %q, want %q", filepath.Base(file), v.Infected, v.Signature, want)
		}
	}
	// Made again from the cache, not regenerated.
	st, _ := os.Stat(db.Files[0])
	db2, err := ensureSigDB(filepath.Dir(filepath.Dir(db.Dir)), sigCounts{md5: 3000, sha256: 2000, body: 1500, logical: 500})
	if st2, _ := os.Stat(db2.Files[0]); err != nil || !st2.ModTime().Equal(st.ModTime()) || db2.Signatures != db.Signatures {
		t.Errorf("second call: %v, %+v", err, db2)
	}
}
