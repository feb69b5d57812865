package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// devtools is a headless Chromium driven over the DevTools protocol on a pipe, kept open so that a test
// can look at the page (evaluate, take screenshots) while it runs: the console's tests and the HLS
// player's. Chromium reads the protocol's commands on fd 3 and writes its answers on fd 4.
type devtools struct {
	t       *testing.T
	in      *os.File
	answers *bufio.Reader
	stderr  *bytes.Buffer
	id      int
	session string
	close   func() // ends Chromium; harmless when called again
}

// openDevtools starts Chromium with extra flags (a --window-size among them replaces the default) and
// opens url in a page; Chromium ends with close or with the test.
func openDevtools(t *testing.T, pageURL string, flags ...string) *devtools {
	t.Helper()
	bin := testenv.RequireBinary(t, "chromium")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-extensions", "--disable-background-networking", "--mute-audio",
		"--user-data-dir=" + t.TempDir(), "--remote-debugging-pipe"}, flags...)
	if !slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, "--window-size=") }) {
		args = append(args, "--window-size=1000,700")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	// Chromium reads the protocol's commands on fd 3 and writes its answers on fd 4, each ended by a NUL.
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	d := &devtools{t: t, in: cmdW, answers: bufio.NewReader(outR), stderr: &bytes.Buffer{}}
	cmd.ExtraFiles, cmd.Stderr = []*os.File{cmdR, outW}, d.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	cmdR.Close()
	outW.Close()
	d.close = sync.OnceFunc(func() {
		cmdW.Close() // Chromium exits when its pipe closes
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		outR.Close()
		cancel()
	})
	t.Cleanup(d.close)
	var target struct{ TargetID string }
	_ = json.Unmarshal(d.call("Target.createTarget", map[string]any{"url": pageURL}), &target)
	var attached struct{ SessionID string }
	_ = json.Unmarshal(d.call("Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}), &attached)
	d.session = attached.SessionID
	return d
}

// call sends one command (to the page once attached) and returns its result, skipping events.
func (d *devtools) call(method string, params any) json.RawMessage {
	d.t.Helper()
	d.id++
	m := map[string]any{"id": d.id, "method": method, "params": params}
	if d.session != "" {
		m["sessionId"] = d.session
	}
	msg, _ := json.Marshal(m)
	if _, err := d.in.Write(append(msg, 0)); err != nil {
		d.t.Fatalf("DevTools %s: %v\n%s", method, err, d.stderr.String())
	}
	for {
		line, err := d.answers.ReadBytes(0)
		if err != nil {
			d.t.Fatalf("DevTools %s: %v\n%s", method, err, d.stderr.String())
		}
		var ans struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct{ Message string }
		}
		if json.Unmarshal(line[:len(line)-1], &ans) != nil || ans.ID != d.id {
			continue
		}
		if ans.Error != nil {
			d.t.Fatalf("DevTools %s: %s", method, ans.Error.Message)
		}
		return ans.Result
	}
}

// eval evaluates expr (JavaScript giving a string) in the page.
func (d *devtools) eval(expr string) string {
	d.t.Helper()
	var ev struct {
		Result struct{ Value any }
	}
	_ = json.Unmarshal(d.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}), &ev)
	s, _ := ev.Result.Value.(string)
	return s
}

// screenshot captures the page's area x, y, w×h (CSS pixels) as an image.
func (d *devtools) screenshot(x, y, w, h float64) image.Image {
	d.t.Helper()
	var shot struct{ Data string }
	_ = json.Unmarshal(d.call("Page.captureScreenshot", map[string]any{"format": "png",
		"clip": map[string]any{"x": x, "y": y, "width": w, "height": h, "scale": 1}}), &shot)
	raw, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		d.t.Fatalf("screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		d.t.Fatalf("screenshot: %v", err)
	}
	return img
}

// chromiumWait opens url in headless Chromium and evaluates expr (JavaScript giving a string) in the
// page every 200 ms until done accepts its value or 30 s pass; it returns the last value. For what
// --dump-dom cannot tell, such as an image's natural size.
func chromiumWait(t *testing.T, url, expr string, done func(string) bool) string {
	t.Helper()
	d := openDevtools(t, url, "--window-size=1400,1000")
	defer d.close()
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if last = d.eval(expr); done(last) {
			break
		}
	}
	return last
}
