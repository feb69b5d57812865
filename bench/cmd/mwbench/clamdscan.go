package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// The baselines' virus scan (issue 23): a site's script scans each upload before it runs the tools, so
// the image, video and remux baselines run `clamdscan` on the same file, against the same clamd as the
// worker they are compared with (same config, same signatures, same clean-file cache off), timed inside
// the baseline.
//
// --fdpass on clamd's unix socket, because that is how the worker reaches clamd in these comparisons
// (bench.StartWorker gives it the socket, as scripts/run.sh does): the worker opens its downloaded copy
// and hands clamd the descriptor (FILDES), and `clamdscan --fdpass` does the same with the file it is
// given. The *Scanning* section measures both clients on the same clamd: the worker's FILDES and
// `clamdscan --fdpass` scan at the same speed, so neither side gains from its client. (--stream would
// send the bytes over the socket, INSTREAM, what the worker does over TCP.)

// clamdScan is one clamd as a baseline script reaches it.
type clamdScan struct {
	name string // "deploy" or "fuzzy hash", for the tables
	conf string // clamdscan's config: only LocalSocket
	pid  int    // clamd's process, for its CPU time
}

// newClamdScan writes a clamdscan config for c (clamdscan reads clamd's address from a clamd.conf;
// LocalSocket is all it needs) under dir.
func newClamdScan(c *testenv.Clamd, name, dir string) (clamdScan, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return clamdScan{}, err
	}
	conf := filepath.Join(dir, "clamdscan-"+strings.ReplaceAll(name, " ", "-")+".conf")
	if err := os.WriteFile(conf, []byte("LocalSocket "+strings.TrimPrefix(c.SocketAddr, "unix://")+"\n"), 0o644); err != nil {
		return clamdScan{}, err
	}
	pid, err := bench.FindProcess("--config-file=" + c.ConfigPath)
	if err != nil {
		return clamdScan{}, err
	}
	return clamdScan{name: name, conf: conf, pid: pid}, nil
}

func (s clamdScan) args(file string) []string {
	return []string{"--config-file=" + s.conf, "--fdpass", "--no-summary", file}
}

// scan runs clamdscan on file and returns its wall time. clamdscan exits 1 when it found something and 2
// on an error; both fail the baseline, as they would stop a script before its tools.
func (s clamdScan) scan(ctx context.Context, file string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "clamdscan", s.args(file)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 1 {
			return took, fmt.Errorf("clamdscan found something in %s: %s", filepath.Base(file), strings.TrimSpace(string(out)))
		}
		return took, fmt.Errorf("clamdscan %s: %v: %s", strings.Join(s.args(file), " "), err, strings.TrimSpace(string(out)))
	}
	return took, nil
}

// cpu is clamd's cumulative CPU time: a scan's is the difference around it (the benchmark runs one
// method at a time, so nothing else scans meanwhile).
func (s clamdScan) cpu() time.Duration {
	c, _ := bench.ProcessCPU(s.pid)
	return c
}

// commandLine is the scan for the report.
func (s clamdScan) commandLine(file string) string {
	return "clamdscan " + strings.Join(s.args(file), " ")
}
