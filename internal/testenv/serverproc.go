package testenv

import (
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serverProc is a server a test runs beside it (MinIO, versitygw): started on a port and data the test
// keeps, killed like a crash by Stop, started again on the same by Start, its output in a log file
// whose tail is printed when the test fails.
type serverProc struct {
	t       testing.TB
	what    string // for messages: "MinIO"
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the running process has exited
}

// stopAtEnd stops the server when the test ends, and prints its log's tail if the test failed.
func (p *serverProc) stopAtEnd() {
	p.t.Cleanup(func() {
		p.Stop()
		if p.t.Failed() {
			if b, err := os.ReadFile(p.logPath); err == nil {
				p.t.Logf("%s log (%s):\n%s", p.what, p.logPath, TailLines(b, 80))
			}
		}
	})
}

// start runs cmd unless the server is running, and waits (30 s at most) until ready, asked with a
// short-timeout client, says it serves. A process that exits meanwhile fails the test with its log.
func (p *serverProc) start(cmd func() *exec.Cmd, ready func(client *http.Client) error) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return
	}
	logf, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatalf("opening %s log: %v", p.what, err)
	}
	c := cmd()
	c.Stdout, c.Stderr = logf, logf
	// Die with the test binary even if it is killed before cleanups run.
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		logf.Close()
		p.t.Fatalf("starting %s: %v", p.what, err)
	}
	done := make(chan struct{})
	go func() {
		_ = c.Wait()
		logf.Close()
		close(done)
	}()
	p.cmd, p.done = c, done
	client := &http.Client{Timeout: time.Second}
	Eventually(p.t, 30*time.Second, func() error {
		select {
		case <-done:
			log, _ := os.ReadFile(p.logPath)
			p.t.Fatalf("%s exited during start-up: %s\n%s", p.what, c.ProcessState, TailLines(log, 40))
		default:
		}
		return ready(client)
	})
}

// Stop kills the server (like a crash: no graceful shutdown) and waits for it to exit. Its data stays
// for Start. It does nothing if the server is not running.
func (p *serverProc) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd, p.done = nil, nil
}
