package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// The config file and the environment as operators meet them: judged on the built binary (startup_test.go's
// binary), with nothing started but what each case needs.

// execWorker runs the built binary with args and extra environment, and returns its exit code, output and
// peak memory. Every run is bounded in time.
func execWorker(t *testing.T, env []string, args ...string) (code int, stdout, stderr string, maxRSSKiB int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		code = ee.ExitCode()
	default:
		t.Fatalf("%v: %v (ctx %v)\nstderr:\n%s", args, err, ctx.Err(), errb.String())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		maxRSSKiB = ru.Maxrss
	}
	return code, out.String(), errb.String(), maxRSSKiB
}

// lineOf returns the output's line that matches re, failing when there is not exactly one.
func lineOf(t *testing.T, out string, re *regexp.Regexp) string {
	t.Helper()
	var found []string
	for _, l := range strings.Split(out, "\n") {
		if re.MatchString(l) {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one line matching %s, got %d:\n%s", re, len(found), out)
	}
	return found[0]
}

const fileSigningKey = "file-signing-key-0123456789abcdef0123456789"

// An empty variable (a template's unset ${KEY}) is not a setting: it neither clears the file's signing
// key, token or NATS URL, nor hides a standard variable behind it; each is warned of by name.
func TestEmptyVariableIsNotASetting(t *testing.T) {
	natsURL := "nats://" + testenv.FreeAddr(t)
	path := writeConfig(t, fmt.Sprintf("nats:\n  url: %s\nhttp:\n  url_signing_key: %s\n  scan_api_token: file-token-0123456789\n", natsURL, fileSigningKey))
	empty := []string{"MW_URL_SIGNING_KEY=", "MW_NATS_URL=", "MW_SCAN_API_TOKEN="}

	code, out, errs, _ := execWorker(t, empty, "config", "--config", path)
	if code != exitOK {
		t.Fatalf("config: exit %d\n%s", code, errs)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`nats\.url\s+--nats-url\s+` + regexp.QuoteMeta(natsURL) + `\s+` + regexp.QuoteMeta(path) + `:2\s*$`),
		regexp.MustCompile(`http\.url_signing_key\s+--url-signing-key\s+\*\*\*\*\s+` + regexp.QuoteMeta(path) + `:4\s*$`),
		regexp.MustCompile(`http\.scan_api_token\s+--scan-api-token\s+\*\*\*\*\s+` + regexp.QuoteMeta(path) + `:5\s*$`),
	} {
		lineOf(t, out, want)
	}
	for _, v := range []string{"MW_URL_SIGNING_KEY", "MW_NATS_URL", "MW_SCAN_API_TOKEN"} {
		lineOf(t, errs, regexp.MustCompile(`^warning: `+v+` is set but empty: ignored`))
	}

	// Without a file, an empty MW_NATS_URL does not hide NATS_URL.
	code, out, errs, _ = execWorker(t, []string{"MW_NATS_URL=", "NATS_URL=" + natsURL}, "config")
	if code != exitOK {
		t.Fatalf("config: exit %d\n%s", code, errs)
	}
	lineOf(t, out, regexp.MustCompile(`nats\.url\s+--nats-url\s+`+regexp.QuoteMeta(natsURL)+`\s+NATS_URL\s*$`))

	// run takes the file's cluster rather than starting its own server: it goes past the embedded
	// server's data dir (not writable here) to clamd (not answering here).
	notADir := filepath.Join(writeConfig(t, ""), "data")
	code, _, errs, _ = execWorker(t, empty, "run", "--config", path, "--data-dir", notADir, "--tmp-dir", t.TempDir(),
		"--http-addr", "127.0.0.1:0", "--clamd-addr", "tcp://"+testenv.FreeAddr(t), "--clamd-wait", "1ms")
	if code == exitOK || strings.Contains(errs, "--data-dir") || !strings.Contains(errs, "--clamd-addr") {
		t.Fatalf("run with an empty MW_NATS_URL: exit %d, want it to stop at clamd, not at the embedded server's data dir:\n%s", code, errs)
	}
	lineOf(t, errs, regexp.MustCompile(`"level":"warn".*MW_NATS_URL is set but empty`))
}

// A variable that overrides a file setting is logged, once, naming the setting and the variable and
// never the value.
func TestVariableOverridingTheFileIsLogged(t *testing.T) {
	path := writeConfig(t, "http:\n  url_signing_key: "+fileSigningKey+"\n")
	const envKey = "env-signing-key-fedcba9876543210fedcba9876543210"
	code, _, errs, _ := execWorker(t, []string{"MW_URL_SIGNING_KEY=" + envKey}, "run", "--config", path,
		"--data-dir", t.TempDir(), "--tmp-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--clamd-addr", "tcp://"+testenv.FreeAddr(t), "--clamd-wait", "1ms")
	if code == exitOK {
		t.Fatalf("run started without clamd:\n%s", errs)
	}
	l := lineOf(t, errs, regexp.MustCompile(`MW_URL_SIGNING_KEY`))
	for _, want := range []string{`"level":"info"`, "http.url_signing_key", "--url-signing-key", path + ":2"} {
		if !strings.Contains(l, want) {
			t.Errorf("the override's line lacks %q: %s", want, l)
		}
	}
	for _, secret := range []string{envKey, fileSigningKey} {
		if strings.Contains(errs, secret) {
			t.Errorf("a signing key reached the log:\n%s", errs)
		}
	}
}

// config check tells every mistake of a file in one run, in the file's order, each at file:line:col:
// a key's, a recipe's, and what a value breaks (a check that only the whole config can make).
func TestConfigCheckTellsEveryMistake(t *testing.T) {
	path := writeConfig(t, `clamd:
  adr: tcp://127.0.0.1:1
images:
  high_size: -5
recipes:
  card:
    images:
      - {name: card, widht: 10}
`)
	code, out, errs, _ := execWorker(t, nil, "config", "check", path)
	if code != exitUsage || out != "" {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitUsage, out, errs)
	}
	lines := strings.Split(strings.TrimRight(errs, "\n"), "\n")
	want := []string{
		path + `:2:3: clamd.adr: unknown key "adr" (did you mean "addr"?)`,
		path + `:4:14: images.high_size (--image-high-size): images: image sizes must satisfy`,
		path + `:8:22: recipes.card.images[0].widht: unknown key "widht" (did you mean "width"?)`,
	}
	if len(lines) != len(want) {
		t.Fatalf("want %d lines, one per mistake, got %d:\n%s", len(want), len(lines), errs)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], "mediaworker config check: "+w) {
			t.Errorf("line %d:\n got %s\nwant mediaworker config check: %s…", i+1, lines[i], w)
		}
	}
}

// The config file is read up to 256 KiB: a device or a huge file named by mistake is refused at once,
// in bounded memory.
func TestConfigFileSizeIsBounded(t *testing.T) {
	binary(t) // built before the clock starts
	huge := filepath.Join(t.TempDir(), "huge.yaml")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 100<<20); err != nil { // sparse: costs no disk
		t.Fatal(err)
	}
	for _, path := range []string{"/dev/zero", huge} {
		start := time.Now()
		code, _, errs, rss := execWorker(t, nil, "config", "check", path)
		t.Logf("%s: exit %d in %s, peak RSS %d MiB", path, code, time.Since(start).Round(time.Millisecond), rss>>10)
		if code != exitUsage || !strings.Contains(errs, path+": config file larger than 256 KiB") {
			t.Errorf("%s: exit %d, want %d saying the file is too large:\n%s", path, code, exitUsage, errs)
		}
		if rss > 80<<10 {
			t.Errorf("%s: peak RSS %d MiB, want under 80 MiB (the binary alone takes ~35)", path, rss>>10)
		}
	}

	// The costliest file within the bound (one node per two bytes) is read in bounded memory too.
	wide := writeConfig(t, "x-list: ["+strings.Repeat("1,", (maxConfigBytes-16)/2)+"1]\n")
	code, out, errs, rss := execWorker(t, nil, "config", "check", wide)
	t.Logf("a %d KiB list of numbers: exit %d, peak RSS %d MiB", maxConfigBytes>>10, code, rss>>10)
	if code != exitOK || !strings.Contains(out, ": valid") {
		t.Errorf("a file just within the bound: exit %d\n%s%s", code, out, errs)
	}
	if rss > 160<<10 {
		t.Errorf("a file just within the bound: peak RSS %d MiB, want under 160 MiB", rss>>10)
	}
}

// YAML anchors, aliases and merge keys work, within a bound: an alias bomb or an alias inside its own
// value is refused with a sentence, fast.
func TestConfigFileAnchorsAndMergeKeys(t *testing.T) {
	path := writeConfig(t, `x-clamd: &clamd
  addr: tcp://127.0.0.1:3999
  scan_timeout: 45s
x-thumb: &thumb {width: 256, height: 256, fit: cover, format: webp}
clamd:
  <<: *clamd
  scan_timeout: 50s
recipes:
  avatar:
    images:
      - {<<: *thumb, name: avatar}
  card: &card
    images:
      - {<<: *thumb, name: card, width: 1200}
  card2: *card
`)
	code, out, errs, _ := execWorker(t, nil, "config", "--config", path)
	if code != exitOK {
		t.Fatalf("config: exit %d\n%s", code, errs)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`clamd\.addr\s+--clamd-addr\s+tcp://127\.0\.0\.1:3999\s+` + regexp.QuoteMeta(path) + `:2\s*$`),
		regexp.MustCompile(`clamd\.scan_timeout\s+--clamd-scan-timeout\s+50s\s+` + regexp.QuoteMeta(path) + `:7\s*$`), // beside the merge: wins
		regexp.MustCompile(`avatar \(.*\): images: avatar 256×256 cover webp`),
		regexp.MustCompile(`card \(.*\): images: card 1200×256 cover webp`),
		regexp.MustCompile(`card2 \(.*\): images: card 1200×256 cover webp`),
	} {
		lineOf(t, out, want)
	}

	var bomb strings.Builder
	bomb.WriteString("x-0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n")
	for i := 1; i < 10; i++ { // 10^10 values, written in 10 lines
		fmt.Fprintf(&bomb, "x-%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	bomb.WriteString("clamd: {addr: *a9}\n")
	for _, tc := range []struct{ name, body, want string }{
		{"alias bomb", bomb.String(), "aliases (*name) and merge keys (<<) expand to more than 20000 values"},
		{"alias inside itself", "clamd: &c\n  addr: *c\n", ":2:9: alias *c is inside the value it names"},
		{"merge of a list of numbers", "x-n: &n [1, 2]\nclamd:\n  <<: *n\n", ":3:7: a merge key (<<) takes a mapping or a list of mappings, got the number 1"},
	} {
		start := time.Now()
		code, _, errs, _ := execWorker(t, nil, "config", "check", writeConfig(t, tc.body))
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: exit %d, want %d saying %q:\n%s", tc.name, code, exitUsage, tc.want, errs)
		}
		t.Logf("%s: refused in %s", tc.name, time.Since(start).Round(time.Millisecond))
	}
}

// An alias of a long text counts by its bytes, not as one value: 2500 copies of a 20 KiB scalar, each
// quoted by its variant's error (format: *big), were 50 MB told and ~300 MB of memory for a 26 KiB
// file (a 100 KiB scalar: 250 MB told, 1.5 GB). Now refused at the bound, with one short sentence.
func TestConfigFileAliasOfLongTextIsBounded(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "x-s: &s %q\nx-v: &v {format: *s}\nx-l: &l [%s]\nrecipes:\n",
		strings.Repeat("A", 20<<10), strings.TrimSuffix(strings.Repeat("*v, ", 50), ", "))
	for i := range 50 {
		fmt.Fprintf(&b, "  r%d: {images: *l}\n", i)
	}
	code, _, errs, rss := execWorker(t, nil, "config", "check", writeConfig(t, b.String()))
	t.Logf("exit %d, %d bytes told, peak RSS %d MiB", code, len(errs), rss>>10)
	if want := "expand to more than 1024 KiB of text"; code != exitUsage || !strings.Contains(errs, want) {
		t.Errorf("exit %d, want %d saying %q:\n%.2000s", code, exitUsage, want, errs)
	}
	if len(errs) > 4<<10 {
		t.Errorf("%d bytes told, want a sentence", len(errs))
	}
	if rss > 100<<10 {
		t.Errorf("peak RSS %d MiB, want under 100 MiB", rss>>10)
	}
}
