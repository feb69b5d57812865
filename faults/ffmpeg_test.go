package faults

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// ---------------------------------------------------------------------------------------------------
// A controllable ffmpeg.

// ffmpegWrapper is a stand-in for ffmpeg that records every video encode (pid and the worker's pid) and
// can delay it or hold it until released, then execs the real ffmpeg. Only encodes (libx264) are
// affected; posters, stream-copy remuxes and HLS run at once. The worker gives ffmpeg an environment with PATH only,
// so the wrapper's control files are baked into the script.
type ffmpegWrapper struct {
	path string
	ctl  string
	real string // the ffmpeg it execs
	t    *testing.T
}

type encodeRun struct{ pid, workerPID int }

func newFFmpegWrapper(t *testing.T) *ffmpegWrapper {
	t.Helper()
	real := testenv.RequireBinary(t, "ffmpeg")
	dir := t.TempDir()
	f := &ffmpegWrapper{path: filepath.Join(dir, "ffmpeg"), ctl: filepath.Join(dir, "ctl"), t: t}
	if err := os.Mkdir(f.ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
# Fault-test stand-in for ffmpeg (faults/harness_test.go).
case "$*" in
*libx264*)
	echo "$$ $PPID" >> '%[1]s/encodes'
	if [ -f '%[1]s/delay' ]; then sleep "$(cat '%[1]s/delay')"; fi
	while [ -e '%[1]s/hold' ]; do sleep 0.05; done
	;;
esac
exec '%[2]s' "$@"
`, f.ctl, real)
	if err := os.WriteFile(f.path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f.real = real
	// Whatever a test left running (an orphan of a killed worker, a held encode) goes with the test.
	t.Cleanup(func() {
		for _, e := range f.encodes() {
			f.kill(e)
		}
	})
	return f
}

// hold makes encodes wait until release.
func (f *ffmpegWrapper) hold() {
	if err := os.WriteFile(filepath.Join(f.ctl, "hold"), nil, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *ffmpegWrapper) release() {
	if err := os.Remove(filepath.Join(f.ctl, "hold")); err != nil && !errors.Is(err, os.ErrNotExist) {
		f.t.Fatal(err)
	}
}

// delay makes every encode start d later.
func (f *ffmpegWrapper) delay(d time.Duration) {
	if err := os.WriteFile(filepath.Join(f.ctl, "delay"), []byte(strconv.FormatFloat(d.Seconds(), 'f', 3, 64)), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// encodes lists the encodes started so far.
func (f *ffmpegWrapper) encodes() []encodeRun {
	b, err := os.ReadFile(filepath.Join(f.ctl, "encodes"))
	if err != nil {
		return nil
	}
	var out []encodeRun
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e encodeRun
		if _, err := fmt.Sscan(line, &e.pid, &e.workerPID); err == nil {
			out = append(out, e)
		}
	}
	return out
}

// kill stops an encode's process group if it still runs (an orphan of a killed worker, or one a test
// held), checking first that the pid is still the wrapper or the ffmpeg it became, not a reused one.
func (f *ffmpegWrapper) kill(e encodeRun) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", e.pid))
	if err != nil || !alive(e.pid) {
		return
	}
	argv := strings.Split(string(b), "\x00")
	if slices.Contains(argv, f.path) || argv[0] == f.real {
		_ = syscall.Kill(-e.pid, syscall.SIGKILL) // its own process group: ffmpeg, or the script and its sleep
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
