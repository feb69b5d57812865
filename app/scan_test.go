package app_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// Slow or stalled uploads to /v1/scan never hold a scan slot: with both slots' worth of clients
// stalled mid-body, a third caller is answered at once, and the stalled ones get 408 after the stall
// timeout.
func TestScanAPIStalledUploadsDoNotLockOut(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) {
		c.ScanAPI.Concurrency = 2
		c.ScanAPI.StallTimeout = 2 * time.Second
	})
	addr := w.app.HTTPAddr()
	var stalled []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /v1/scan HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n%s", strings.Repeat("a", 1000))
		stalled = append(stalled, c)
	}
	// Give the server a moment to start on both bodies. The test passes either way; without it, it could
	// miss a server that takes its scan slot before it reads the body.
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	resp, err := http.Post("http://"+addr+"/v1/scan", "application/octet-stream", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != 200 || took > 5*time.Second {
		t.Fatalf("third caller: %s after %s, want 200 within a few seconds", resp.Status, took)
	}
	for i, c := range stalled {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("stalled upload %d: %v", i, err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusRequestTimeout {
			t.Errorf("stalled upload %d: %s, want 408", i, r.Status)
		}
	}
	scratchEmpty(t, w)
}

// Bodies are received into the scratch dir, never into the space kept free for jobs.
func TestScanAPIKeepsScratchFloorForJobs(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) { c.Pipeline.MinFreeBytes = 1 << 60 })
	resp, err := http.Post("http://"+w.app.HTTPAddr()+"/v1/scan", "application/octet-stream", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "scratch space is low") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%s %s, want 503 naming the scratch floor", resp.Status, body)
	}
}

// The scan API answers in sentences made where the failure is, never with the error's own text: a
// scratch dir that cannot take the body (here: removed under the worker) is told as such, without its
// path or the system's words, which only the log gets.
func TestScanAPIAnswersNameNoScratchPath(t *testing.T) {
	clamd := testenv.StartClamd(t)
	var scratch string
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) {
		scratch = filepath.Join(t.TempDir(), "scratch")
		c.Pipeline.TmpDir = scratch
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, err := os.Stat(scratch); err != nil {
			return err
		}
		return nil
	})
	if err := os.RemoveAll(scratch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.MkdirAll(scratch, 0o700) }) // for the world's own clean-up checks
	resp, err := http.Post("http://"+w.app.HTTPAddr()+"/v1/scan", "application/octet-stream", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || strings.Contains(string(body), scratch) ||
		strings.Contains(string(body), "no such file") || !strings.Contains(string(body), "could not store the body") {
		t.Fatalf("%s %s: want 500 saying the body could not be stored, naming no path (%s) and no system error", resp.Status, body, scratch)
	}
}
