package main

import (
	"bufio"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// A signature database of realistic size and shape for pricing scans (issue 13): sites run ClamAV's
// official database (millions of hash signatures, ~100k body and logical ones), and clamd's cost per
// byte grows with the body signatures it must match, so a one-signature development set hides it.
// The set is generated at bench time from a fixed seed (never committed; cached next to the corpus),
// in the formats of ClamAV's signature documentation (docs.clamav.net, "Creating signatures"):
//
//	.hdb  MD5:FileSize:MalwareName                      (file hashes)
//	.hsb  SHA256:FileSize:MalwareName
//	.ndb  MalwareName:TargetType:Offset:HexSignature    (body signatures: wildcards ??, x?, {n-m}, *,
//	                                                     (aa|bb) alternatives; offsets *, n, n,m, EOF-n, EP+n)
//	.ldb  MalwareName;Engine:a-b,Target:t;LogicalExpression;Subsig0;Subsig1;...
//
// Target types are spread like the official set's: mostly PE executables (1), then any file (0),
// HTML (3), ASCII text/scripts (7), OLE2 documents (2), PDF (10), ELF (6) and graphics (5).
// The random content cannot match real files except by chance; two canaries prove clamd loaded the
// set and matches with it: a file whose MD5 is in the .hdb and one carrying a body signature's bytes.

// sigDBVersion names the cache directory; bump it when the generator or its counts change.
const sigDBVersion = "sigdb-v2"

// sigCounts are the generated signatures per file.
type sigCounts struct{ md5, sha256, body, logical int }

// realisticSigCounts: hash signatures dominate, as in main.cvd and daily.cvd; body and logical
// signatures are tens of thousands.
var realisticSigCounts = sigCounts{md5: 300_000, sha256: 150_000, body: 30_000, logical: 10_000}

func (c sigCounts) String() string {
	return fmt.Sprintf("%d MD5 (.hdb), %d SHA256 (.hsb), %d body (.ndb), %d logical (.ldb)", c.md5, c.sha256, c.body, c.logical)
}

// SigDB is a generated database and its canaries.
type SigDB struct {
	Dir        string // holds bench.hdb, bench.hsb, bench.ndb, bench.ldb: copy into clamd's DatabaseDirectory
	Files      []string
	Signatures int // lines written, canaries included
	HashCanary string
	BodyCanary string
	// Canary signature names clamd reports for the two canaries.
	HashCanaryName, BodyCanaryName string
}

// ensureSigDB generates the database into cacheRoot/sigDBVersion unless it is there already (each file
// is written under a temporary name and renamed, and the set is marked complete last, so an
// interrupted run leaves no half set that looks whole).
func ensureSigDB(cacheRoot string, counts sigCounts) (SigDB, error) {
	dir := filepath.Join(cacheRoot, fmt.Sprintf("%s-%d-%d-%d-%d", sigDBVersion, counts.md5, counts.sha256, counts.body, counts.logical))
	db := SigDB{Dir: filepath.Join(dir, "db"), HashCanary: filepath.Join(dir, "canary-hash.bin"),
		BodyCanary: filepath.Join(dir, "canary-body.bin"), HashCanaryName: "Bench.Canary.Hash-1-0",
		BodyCanaryName: "Bench.Canary.Body-1-0"}
	names := []string{"bench.hdb", "bench.hsb", "bench.ndb", "bench.ldb"}
	for _, n := range names {
		db.Files = append(db.Files, filepath.Join(db.Dir, n))
	}
	done := filepath.Join(dir, "complete")
	if b, err := os.ReadFile(done); err == nil {
		_, err := fmt.Sscanf(string(b), "%d", &db.Signatures)
		return db, err
	}
	if err := os.MkdirAll(db.Dir, 0o755); err != nil {
		return db, fmt.Errorf("making the signature cache: %w", err)
	}
	g := sigGen{r: rand.New(rand.NewPCG(13, 2026))}

	// Canaries: random content, one hashed into the .hdb, one carrying a body signature's bytes in the
	// middle of random bytes.
	hashCanary := g.bytes(200 << 10)
	marker := g.bytes(48)
	bodyCanary := append(append(g.bytes(300<<10), marker...), g.bytes(300<<10)...)
	for p, b := range map[string][]byte{db.HashCanary: hashCanary, db.BodyCanary: bodyCanary} {
		if err := writeAtomic(p, func(w *bufio.Writer) error { _, err := w.Write(b); return err }); err != nil {
			return db, err
		}
	}
	sum := md5.Sum(hashCanary)

	n := 0
	gens := []func(w *bufio.Writer) error{
		func(w *bufio.Writer) error { // .hdb
			fmt.Fprintf(w, "%s:%d:%s\n", hex.EncodeToString(sum[:]), len(hashCanary), db.HashCanaryName)
			for i := range counts.md5 {
				h := md5.Sum(g.bytes(64))
				fmt.Fprintf(w, "%s:%d:%s\n", hex.EncodeToString(h[:]), g.fileSize(), g.name(i))
			}
			n += counts.md5 + 1
			return nil
		},
		func(w *bufio.Writer) error { // .hsb
			for i := range counts.sha256 {
				h := sha256.Sum256(g.bytes(64))
				fmt.Fprintf(w, "%s:%d:%s\n", hex.EncodeToString(h[:]), g.fileSize(), g.name(i))
			}
			n += counts.sha256
			return nil
		},
		func(w *bufio.Writer) error { // .ndb
			// The canary: the marker's middle 32 bytes with two wildcards, anywhere in any file.
			m := hex.EncodeToString(marker[8:40])
			fmt.Fprintf(w, "%s:0:*:%s??%s{0-4}%s\n", db.BodyCanaryName, m[:20], m[22:40], m[40:])
			for i := range counts.body {
				t := g.target()
				fmt.Fprintf(w, "%s:%d:%s:%s\n", g.name(i), t, g.offset(t), g.hexSig(t))
			}
			n += counts.body + 1
			return nil
		},
		func(w *bufio.Writer) error { // .ldb
			for i := range counts.logical {
				t := g.target()
				subs := 2 + g.r.IntN(3)
				parts := []string{g.name(i), fmt.Sprintf("Engine:51-255,Target:%d", t), g.expr(subs)}
				for range subs {
					parts = append(parts, g.hexSig(t))
				}
				fmt.Fprintln(w, strings.Join(parts, ";"))
			}
			n += counts.logical
			return nil
		},
	}
	for i, gen := range gens {
		if err := writeAtomic(db.Files[i], gen); err != nil {
			return db, err
		}
	}
	db.Signatures = n
	return db, os.WriteFile(done, []byte(fmt.Sprintf("%d\n", n)), 0o644)
}

// writeAtomic writes path through a buffered writer into a temporary file renamed into place.
func writeAtomic(path string, fill func(w *bufio.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = fill(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// sigGen draws the parts of signatures from a seeded generator, so every run makes the same set.
type sigGen struct{ r *rand.Rand }

func (g sigGen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.r.UintN(256))
	}
	return b
}

// fileSize is log-uniform between 8 KiB and 16 MiB, the span of most malware samples.
func (g sigGen) fileSize() int {
	return int(math.Exp(math.Log(8<<10) + g.r.Float64()*(math.Log(16<<20)-math.Log(8<<10))))
}

var (
	sigPlatforms  = []string{"Win", "Win", "Win", "Win", "Doc", "Html", "Js", "Pdf", "Unix", "Andr", "Osx", "Txt", "Img"}
	sigCategories = []string{"Trojan", "Trojan", "Malware", "Downloader", "Exploit", "Dropper", "Worm", "Ransomware", "Phishing", "Coinminer", "Packed"}
	sigFamilies   = []string{"Agent", "Generic", "Emotet", "Qakbot", "Zbot", "Mirai", "Gafgyt", "Nemucod", "Valyria", "Ramnit", "Sality", "Ursnif", "AgentTesla", "Lokibot", "Formbook", "Remcos"}
	// sigTargets weights ClamAV's target types roughly as the official body and logical sets do.
	sigTargets = []int{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 3, 3, 7, 7, 2, 2, 10, 6, 5}
)

// name is Platform.Category.Family-ID-Revision, as the official set names signatures.
func (g sigGen) name(i int) string {
	return fmt.Sprintf("%s.%s.%s-%d-%d", sigPlatforms[g.r.IntN(len(sigPlatforms))], sigCategories[g.r.IntN(len(sigCategories))],
		sigFamilies[g.r.IntN(len(sigFamilies))], 9_000_000+i, g.r.IntN(3))
}

func (g sigGen) target() int { return sigTargets[g.r.IntN(len(sigTargets))] }

// offset is where a body signature may start: anywhere (most), at a fixed offset or in a window, near
// the end, or (for executables) relative to the entry point.
func (g sigGen) offset(target int) string {
	switch x := g.r.IntN(10); {
	case x < 6:
		return "*"
	case x < 7:
		return fmt.Sprint(g.r.IntN(4096))
	case x < 8:
		return fmt.Sprintf("%d,%d", g.r.IntN(1024), 256+g.r.IntN(8192))
	case x < 9:
		return fmt.Sprintf("EOF-%d", 64+g.r.IntN(4096))
	case target == 1 || target == 6:
		return fmt.Sprintf("EP+%d", g.r.IntN(512))
	}
	return "*"
}

// hexSig is a body pattern for target type t: two to four static runs of 4-24 bytes joined by
// ClamAV's wildcards, with an occasional nibble wildcard or alternative inside a run. A third of the
// runs are not random: real signatures hold script and API strings (HTML, text, any file) and x86
// code (executables), whose bytes recur in files far more than random ones and so send clamd's
// matcher to check candidates more often.
func (g sigGen) hexSig(t int) string {
	var b strings.Builder
	runs := 2 + g.r.IntN(3)
	for i := range runs {
		if i > 0 {
			switch x := g.r.IntN(10); {
			case x < 3:
				b.WriteString("??")
			case x < 5:
				fmt.Fprintf(&b, "{%d}", 1+g.r.IntN(16))
			case x < 8:
				lo := g.r.IntN(32)
				fmt.Fprintf(&b, "{%d-%d}", lo, lo+1+g.r.IntN(256))
			default:
				b.WriteString("*")
			}
		}
		run := hex.EncodeToString(g.staticRun(t))
		switch x := g.r.IntN(10); {
		case x == 0: // a nibble wildcard in the middle of the run
			k := 2 * (2 + g.r.IntN(len(run)/2-3))
			run = run[:k] + "?" + run[k+1:]
		case x == 1: // an alternative of two single bytes, between static bytes
			k := 2 * (2 + g.r.IntN(len(run)/2-3))
			run = run[:k] + fmt.Sprintf("(%02x|%02x)", g.r.IntN(256), g.r.IntN(256)) + run[k+2:]
		}
		b.WriteString(run)
	}
	return b.String()
}

// sigStrings and sigCode are the material of non-random runs: strings of scripts and Windows API
// names that real signatures quote, and common x86 instruction bytes.
var (
	sigStrings = []string{"eval(", "unescape(", "document.write(", "String.fromCharCode", "<script", "<iframe ",
		"ActiveXObject", "WScript.Shell", "powershell -", "cmd.exe /c", "http://", "base64,", "function(",
		"window.location", "CreateObject(", "Shell.Application", ".exe", "VirtualAlloc", "LoadLibraryA",
		"GetProcAddress", "kernel32.dll", "WriteProcessMemory", "Content-Type", "/JavaScript", "/OpenAction"}
	sigCode = [][]byte{{0x55, 0x8b, 0xec}, {0x83, 0xec}, {0x8b, 0x45, 0x08}, {0x50}, {0xff, 0x15}, {0x6a, 0x00},
		{0xc3}, {0x33, 0xc0}, {0x89, 0x45, 0xfc}, {0x00, 0x00}, {0xe8}, {0x74}, {0x75}, {0x8b, 0x4d}, {0x5d}}
)

// staticRun is one static run of 4-24 bytes: random, or built from sigStrings (for HTML, text and
// any-file targets) or sigCode (executables) with random bytes mixed in.
func (g sigGen) staticRun(t int) []byte {
	n := 4 + g.r.IntN(21)
	if g.r.IntN(3) != 0 {
		return g.bytes(n)
	}
	var b []byte
	for len(b) < n {
		switch {
		case t == 1 || t == 6:
			b = append(b, sigCode[g.r.IntN(len(sigCode))]...)
		case g.r.IntN(2) == 0:
			b = append(b, sigStrings[g.r.IntN(len(sigStrings))]...)
		}
		b = append(b, g.bytes(1+g.r.IntN(3))...)
	}
	return b[:n]
}

// expr is a logical expression over n subsignatures: all of them, any two of them, or the first with
// any of the others.
func (g sigGen) expr(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	switch g.r.IntN(3) {
	case 0:
		return strings.Join(ids, "&")
	case 1:
		return "(" + strings.Join(ids, "|") + ")>1"
	}
	return "0&(" + strings.Join(ids[1:], "|") + ")"
}

// startClamdWithDB starts a clamd like testenv.StartClamdWith (the dev config and signatures, the
// overrides), then restarts it with db's files added to its database directory, so StartupTime is
// clamd's start with the set loaded. It checks clamd's log for load errors.
func startClamdWithDB(tb testing.TB, overrides map[string]string, db SigDB) (*testenv.Clamd, error) {
	c := testenv.StartClamdWith(tb, overrides)
	c.Stop()
	for _, f := range db.Files {
		if err := copyFile(f, filepath.Join(c.Dir, "db", filepath.Base(f))); err != nil {
			return nil, fmt.Errorf("copying the signature set into clamd's database directory: %w", err)
		}
	}
	c.Start()
	if log := c.Log(); strings.Contains(log, "Error") || strings.Contains(log, "Malformed") {
		return nil, fmt.Errorf("clamd reported problems loading the generated signatures:\n%s", log)
	}
	return c, nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
