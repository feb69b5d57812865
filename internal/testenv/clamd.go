package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EICAR is the industry-standard antivirus test string. It is assembled from pieces so that this source
// file is not itself flagged by a scanner; the dev signature database (deploy/clamav/dev-signatures)
// detects it anywhere in a stream, including inside larger files and archives.
const EICAR = `X5O!P%@AP[4\PZX54(P^)7CC)7}$` + "EICAR-STANDARD-" + "ANTIVIRUS-TEST-FILE!" + `$H+H*`

// EICARSignature is the name clamd reports for EICAR with the dev signature database.
const EICARSignature = "MediaWorker.Test.EICAR.UNOFFICIAL"

// clamdStartTimeout bounds one clamd start. With only the dev signatures clamd is ready in seconds; the
// margin is for a loaded 2-core CI machine running other tests at the same time.
const clamdStartTimeout = 60 * time.Second

// managedClamdKeys are the settings of deploy/clamav/clamd.conf that the harness replaces, because they
// are paths or addresses that only make sense for one test run.
var managedClamdKeys = []string{
	"TCPSocket", "TCPAddr", "LocalSocket", "DatabaseDirectory", "TemporaryDirectory", "Foreground",
	"LogFile", "PidFile", "User",
}

// Clamd is a clamd process started for one test with the project's dev config and dev signatures,
// listening on a random loopback TCP port (and a unix socket). It is killed when the test ends.
type Clamd struct {
	// Addr is the TCP address in the scanner's form, "tcp://127.0.0.1:PORT".
	Addr string
	// SocketAddr is the unix socket address in the scanner's form, "unix:///.../clamd.ctl".
	SocketAddr string
	// Dir holds the generated config, the signature database, the socket and clamd's temp files.
	Dir string
	// ConfigPath is the generated clamd.conf.
	ConfigPath string
	// StartupTime is how long the most recent Start took until clamd answered PING.
	StartupTime time.Duration

	t      testing.TB
	bin    string
	tcp    string // host:port
	socket string // path

	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when the current process has exited
	exitErr error
	log     *capBuffer
}

// StartClamd starts clamd with deploy/clamav/clamd.conf and the dev signatures. See StartClamdWith.
func StartClamd(t testing.TB) *Clamd {
	t.Helper()
	return StartClamdWith(t, nil)
}

// StartClamdWith starts clamd with deploy/clamav/clamd.conf, the dev signatures, and the given settings
// replacing the config's (e.g. {"StreamMaxLength": "1M"} for limit tests). It waits until clamd answers
// PING and registers a cleanup that kills it. Call it from the test goroutine.
func StartClamdWith(t testing.TB, overrides map[string]string) *Clamd {
	t.Helper()
	bin := RequireBinary(t, "clamd")
	root := repoRoot(t)

	base, err := os.ReadFile(filepath.Join(root, "deploy", "clamav", "clamd.conf"))
	if err != nil {
		t.Fatalf("reading dev clamd config: %v", err)
	}
	sigs, err := filepath.Glob(filepath.Join(root, "deploy", "clamav", "dev-signatures", "*.ndb"))
	if err != nil || len(sigs) == 0 {
		t.Fatalf("finding dev signatures in deploy/clamav/dev-signatures: %v (found %d)", err, len(sigs))
	}

	// A short directory outside t.TempDir(): unix socket paths are limited to ~108 bytes and test names
	// make t.TempDir() paths long.
	dir, err := os.MkdirTemp("", "mw-clamd-")
	if err != nil {
		t.Fatalf("creating clamd dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dbDir := filepath.Join(dir, "db")
	tmpDir := filepath.Join(dir, "tmp")
	for _, d := range []string{dbDir, tmpDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("creating %s: %v", d, err)
		}
	}
	for _, s := range sigs {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatalf("reading signatures: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dbDir, filepath.Base(s)), b, 0o644); err != nil {
			t.Fatalf("copying signatures: %v", err)
		}
	}

	c := &Clamd{
		Dir:        dir,
		ConfigPath: filepath.Join(dir, "clamd.conf"),
		t:          t,
		bin:        bin,
		socket:     filepath.Join(dir, "clamd.ctl"),
		log:        &capBuffer{max: 256 << 10},
	}
	c.SocketAddr = "unix://" + c.socket
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("clamd output:\n%s", c.log.String())
		}
	})

	c.configure(base, dbDir, tmpDir, overrides)
	c.launch()
	c.waitReady(func() {
		// The free port was found by binding and releasing it, so another process can take it before
		// clamd binds; clamd then exits at once, and we try again on a new port.
		c.configure(base, dbDir, tmpDir, overrides)
		c.launch()
	})
	t.Logf("clamd ready on %s in %s", c.Addr, c.StartupTime.Round(time.Millisecond))
	return c
}

// Start restarts a stopped clamd on the same port and socket and waits until it answers PING. It does
// nothing if clamd is running. Call it from the test goroutine.
func (c *Clamd) Start() {
	c.t.Helper()
	if c.cmd != nil {
		return
	}
	c.launch()
	c.waitReady(nil)
	c.t.Logf("clamd restarted on %s in %s", c.Addr, c.StartupTime.Round(time.Millisecond))
}

// Stop kills clamd and waits until it has exited, so the port refuses connections when Stop returns. It
// is idempotent. Call it from the test goroutine.
func (c *Clamd) Stop() {
	if c.cmd == nil {
		return
	}
	// SIGKILL rather than SIGTERM: fault tests want the daemon gone at once, and clamd keeps nothing
	// worth flushing (its temp files live under Dir, which the cleanup removes).
	_ = c.cmd.Process.Kill()
	<-c.done
	c.cmd = nil
}

// Log returns clamd's recent output (in the foreground it logs detections and limit alerts to stdout).
func (c *Clamd) Log() string { return c.log.String() }

// configure picks a free loopback port and writes the config for it.
func (c *Clamd) configure(base []byte, dbDir, tmpDir string, overrides map[string]string) {
	c.t.Helper()
	port := FreePort(c.t)
	c.tcp = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c.Addr = "tcp://" + c.tcp
	conf := clamdConfig(string(base), map[string]string{
		"TCPSocket":          strconv.Itoa(port),
		"TCPAddr":            "127.0.0.1",
		"LocalSocket":        c.socket,
		"DatabaseDirectory":  dbDir,
		"TemporaryDirectory": tmpDir,
		"Foreground":         "yes",
	}, overrides)
	if err := os.WriteFile(c.ConfigPath, []byte(conf), 0o644); err != nil {
		c.t.Fatalf("writing clamd config: %v", err)
	}
}

// launch starts the clamd process without waiting for it to be ready.
func (c *Clamd) launch() {
	c.t.Helper()
	cmd := exec.Command(c.bin, "--config-file="+c.ConfigPath)
	cmd.Dir = c.Dir
	cmd.Stdout = c.log
	cmd.Stderr = c.log
	// Pdeathsig: if the test binary dies (panic, go test -timeout), clamd must not outlive it holding a
	// port. Linux-only, like the project's deploy target.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	c.started = time.Now()
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("running %s: %v", c.bin, err)
	}
	done := make(chan struct{})
	c.cmd, c.done = cmd, done
	go func() {
		err := cmd.Wait()
		c.exitErr = err // read only after done is closed
		close(done)
	}()
}

// waitReady polls until clamd answers PING. If clamd exits meanwhile, retry (when not nil) is called
// up to twice to launch it again; otherwise the test fails (the cleanup logs clamd's output).
func (c *Clamd) waitReady(retry func()) {
	c.t.Helper()
	retries := 0
	Eventually(c.t, clamdStartTimeout, func() error {
		select {
		case <-c.done:
			c.cmd = nil
			if retry == nil || retries == 2 {
				c.t.Fatalf("clamd exited during start: %v (its output follows the test log)", c.exitErr)
			}
			retries++
			retry()
			return fmt.Errorf("clamd exited during start (%v); retrying", c.exitErr)
		default:
		}
		return pingClamd(c.tcp)
	})
	c.StartupTime = time.Since(c.started)
}

// pingClamd sends zPING and expects PONG. It is independent of package scanner so that scanner's own
// tests can use this harness without an import cycle.
func pingClamd(hostport string) error {
	conn, err := net.DialTimeout("tcp", hostport, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("zPING\x00")); err != nil {
		return err
	}
	reply, err := bufio.NewReader(conn).ReadString(0)
	if err != nil {
		return fmt.Errorf("reading PING reply: %w", err)
	}
	if reply != "PONG\x00" {
		return fmt.Errorf("unexpected PING reply %q", reply)
	}
	return nil
}

// clamdConfig rewrites base: every line setting a managed or overridden key is dropped and the new
// values are appended, so a setting is never given twice (clamd rejects some duplicates).
func clamdConfig(base string, managed, overrides map[string]string) string {
	drop := map[string]bool{}
	for _, k := range managedClamdKeys {
		drop[k] = true
	}
	for k := range managed {
		drop[k] = true
	}
	for k := range overrides {
		drop[k] = true
	}
	var b strings.Builder
	b.WriteString("# Generated by internal/testenv from deploy/clamav/clamd.conf for one test run.\n")
	for _, line := range strings.Split(base, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && !strings.HasPrefix(fields[0], "#") && drop[fields[0]] {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteString("\n# Set by the test harness.\n")
	for _, m := range []map[string]string{managed, overrides} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s %s\n", k, m[k])
		}
	}
	return b.String()
}

// repoRoot is the module's directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// capBuffer keeps the last max bytes written to it; clamd's output is only for diagnosing failures.
type capBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *capBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
