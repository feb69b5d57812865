package transcoder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Running ffmpeg and ffprobe on untrusted input, and classifying how they failed.

// toolRunner runs ffmpeg and ffprobe under the config's resource limits (run) and classifies how a
// run failed.
type toolRunner struct {
	cfg                      VideoConfig
	ffmpeg, ffprobe, prlimit string // absolute paths
}

// classifyFFmpeg turns a failed ffmpeg run on an upload into an error. The input has passed ffprobe,
// so a failure is the input's fault (including running into a resource limit) unless the system is:
// out of disk, read-only, out of file descriptors, an I/O error, or ffmpeg killed by a signal we did
// not cause (the OOM killer). ENOMEM is the input's: -max_alloc and the address-space limit turn an
// absurd allocation into "Cannot allocate memory".
func (t *toolRunner) classifyFFmpeg(ctx context.Context, step string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", step, ctx.Err())
	}
	var te *toolError
	if !errors.As(err, &te) {
		return internal(step, err)
	}
	if lerr := t.limitError(step, te); lerr != nil {
		return lerr
	}
	if words := te.systemFailure(); te.exitCode < 0 || words != "" {
		e := internal(step, err)
		e.Words = words // ffmpeg reports the machine's failures only on its stderr: said here, where it is read
		return e
	}
	// The sentence is for the person who uploaded the file; ffmpeg's own words ("Value inf for
	// parameter 'time_base' out of range", "moov atom not found") are for whoever debugs it: Detail.
	return badInputSaid(step+": "+undecodableVideo, err)
}

// undecodableVideo is the sentence for an upload ffmpeg failed to decode; the image path matches it to
// say the same in an image's words.
const undecodableVideo = "the video could not be decoded (damaged, cut off or in an unusual encoding)"

// limitError says which resource limit a failed run hit, as bad input naming the limit, or returns
// nil when it hit none.
func (t *toolRunner) limitError(step string, te *toolError) *Error {
	switch {
	case te.hitCPULimit():
		msg := fmt.Sprintf("%s: the video needs more CPU time than the limit of %s", step, te.cpuLimit)
		if te.cpuRule != "" {
			msg += " " + te.cpuRule
		}
		return badInputSaid(msg, te)
	case te.signal == syscall.SIGXFSZ:
		return badInputSaid(fmt.Sprintf("%s: the video would write a file larger than the limit of %d MiB",
			step, (t.cfg.MaxOutputBytes+fileSizeMargin)>>20), te)
	case te.outOfMemory():
		return badInputSaid(fmt.Sprintf("%s: the video needs more memory than the limit of %d MiB (%d MiB per allocation)",
			step, t.cfg.MaxMemoryBytes>>20, maxAllocBytes>>20), te)
	}
	return nil
}

// cpuSlack allows for the kernel's accounting granularity when telling whether a run that died used
// up its CPU-time limit.
const cpuSlack = 50 * time.Millisecond

// hitCPULimit reports whether the run ended at its CPU-time limit (RLIMIT_CPU). The kernel kills at
// the hard limit with SIGKILL (SIGXCPU at a soft one) when its own count of the process's CPU time
// reaches it, but the user + system time wait4 reports afterwards can be lower: 0.92 s for runs
// killed at a 1 s limit on this project's machines (a CI run saw a kill it then called "no message").
// So a kill by either signal that we did not send (the caller checks its context first) counts as
// the limit once the reported time is within a fifth of it; the OOM killer, the other sender of an
// unexplained SIGKILL, strikes at any point of a run. Without a signal, the run must have used the
// whole limit.
func (e *toolError) hitCPULimit() bool {
	if e.cpuLimit <= 0 {
		return false
	}
	if e.signal == syscall.SIGKILL || e.signal == syscall.SIGXCPU {
		return e.cpuUsed >= e.cpuLimit-max(cpuSlack, e.cpuLimit/5)
	}
	return e.cpuUsed >= e.cpuLimit-cpuSlack
}

// toolError is a tool that ran and failed.
type toolError struct {
	tool     string
	exitCode int            // -1 when killed by a signal
	signal   syscall.Signal // the signal that killed it, 0 if it exited
	stderr   string
	cpuUsed  time.Duration // user + system CPU time of the run
	cpuLimit time.Duration // the RLIMIT_CPU it ran under
	cpuRule  string        // how cpuLimit follows from the input, when it is not MaxCPUTime (cpuBudget)
}

// systemFailure says, in words for people (Error.Words), what failure of the machine rather than of the
// input stderr shows; "" when it shows none.
func (e *toolError) systemFailure() string {
	for _, sys := range []struct{ said, words string }{
		{"No space left on device", "the scratch disk is full"},
		{"Disk quota exceeded", "the scratch disk is full"},
		{"Read-only file system", "the scratch disk is read-only"},
		{"Too many open files", "the worker has too many files open"},
		{"Input/output error", "the scratch disk failed (a read or write error)"},
		{"Permission denied", "the worker may not write to its scratch directory"},
		// The dynamic loader could not map ffmpeg's libraries: a limit far too small, or a broken install.
		{"error while loading shared libraries", "a media tool could not be started"},
		// prlimit could not set a limit (one above a hard limit of the worker's own environment).
		{"prlimit: ", "a media tool could not be started under its resource limits"},
	} {
		if strings.Contains(e.stderr, sys.said) {
			return sys.words
		}
	}
	return ""
}

// outOfMemory reports whether stderr shows an allocation that failed: under -max_alloc and the
// address-space limit that is the input asking for too much.
func (e *toolError) outOfMemory() bool {
	if e.systemFailure() != "" {
		return false
	}
	for _, msg := range []string{"Cannot allocate memory", "Out of memory", "out of memory", "malloc of size", "std::bad_alloc"} {
		if strings.Contains(e.stderr, msg) {
			return true
		}
	}
	// Some failures print AVERROR(ENOMEM) as a bare number: "get_buffer() failed (-12 (nil))" when a
	// decoder cannot allocate a frame.
	return enomemCode.MatchString(e.stderr)
}

// enomemCode matches a bare AVERROR(ENOMEM), -12, in parentheses.
var enomemCode = regexp.MustCompile(`\(-12[ )]`)

// logContext is the "[mov,mp4,m4a,3gp,3g2,mj2 @ 0x55d0c0a8c2c0] " prefix of ffmpeg's log lines.
var logContext = regexp.MustCompile(`\[[^\]]* @ 0x[0-9a-f]+\] `)

func (e *toolError) Error() string {
	msg := strings.TrimSpace(logContext.ReplaceAllString(e.stderr, ""))
	msg = strings.ReplaceAll(msg, "\n", "; ")
	if msg == "" {
		msg = "no message"
	}
	if e.exitCode < 0 {
		return fmt.Sprintf("%s was killed (%s): %s", e.tool, e.signal, msg)
	}
	return fmt.Sprintf("%s exited with status %d: %s", e.tool, e.exitCode, msg)
}

// run runs one tool on untrusted input: through prlimit(1) with the address-space, CPU-time (cpu),
// file-size and core-dump limits set before the tool starts, in dir (the job's scratch directory),
// with only PATH in its environment, stdin from /dev/null, in its own process group that is killed as
// a whole when ctx ends, stderr's tail kept for the error. While it runs, each growth of its CPU time
// tells ctx's watchers that it moved (reportCPU).
//
// prlimit sets the limits on itself and then execs the tool, so the tool keeps prlimit's pid, process
// group and limits. The CPU limit's soft and hard values are equal: the kernel sends SIGKILL, not
// SIGXCPU (ffmpeg would treat that as a polite request to finish the file).
func (t *toolRunner) run(ctx context.Context, dir, bin string, args []string, stdout io.Writer, cpu time.Duration) error {
	cpuSecs := int64(math.Ceil(cpu.Seconds()))
	wrapped := append([]string{
		"--as=" + strconv.FormatInt(t.cfg.MaxMemoryBytes, 10),
		fmt.Sprintf("--cpu=%d:%d", cpuSecs, cpuSecs),
		"--fsize=" + strconv.FormatInt(t.cfg.MaxOutputBytes+fileSizeMargin, 10),
		"--core=0", // no core dumps of untrusted data
		"--", bin,
	}, args...)
	cmd := exec.CommandContext(ctx, t.prlimit, wrapped...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	// Pdeathsig: if the worker dies without cancelling (OOM-killed, SIGKILL), the tool dies with it
	// instead of running on unsupervised. It survives prlimit's exec.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		// The negative pid is the process group: ffmpeg and anything it started.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// After the kill, don't wait long for pipes a leftover process might hold open.
	cmd.WaitDelay = 5 * time.Second
	stderr := &tailBuffer{max: stderrTail}
	cmd.Stderr = stderr
	if stdout != nil && !isNilBuffer(stdout) {
		cmd.Stdout = stdout
	}
	tool := filepath.Base(bin)
	err := cmd.Start()
	if err == nil {
		stop := reportCPU(ctx, cmd.Process.Pid)
		err = cmd.Wait()
		stop()
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		te := &toolError{tool: tool, exitCode: ee.ExitCode(), stderr: withoutDir(stderr.String(), dir),
			cpuUsed: ee.UserTime() + ee.SystemTime(), cpuLimit: time.Duration(cpuSecs) * time.Second}
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			te.signal = ws.Signal()
		}
		return te
	}
	return fmt.Errorf("running %s: %w", tool, err)
}

// withoutDir removes the scratch directory from a tool's messages: the file names in it are fixed
// ("input", "video.mp4", ...) and say enough, and the error reaches the person who uploaded the file,
// who has no business with the worker's paths.
func withoutDir(msg, dir string) string {
	if dir == "" || dir == "/" {
		return msg
	}
	msg = strings.ReplaceAll(msg, "file:"+dir+"/", "")
	return strings.ReplaceAll(msg, dir+"/", "")
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string { return string(b.buf) }

// limitedBuffer keeps the first max bytes written to it and notes whether there were more.
type limitedBuffer struct {
	bytes.Buffer
	max      int
	overflow bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.max - b.Len(); n > room {
		b.overflow = true
		p = p[:max(room, 0)]
	}
	b.Buffer.Write(p)
	return n, nil // the rest is dropped, not an error: the tool must not block or fail on it
}

// isNilBuffer catches a typed nil *limitedBuffer passed as an io.Writer.
func isNilBuffer(w io.Writer) bool {
	b, ok := w.(*limitedBuffer)
	return ok && b == nil
}
