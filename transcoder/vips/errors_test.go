package vips

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// makeJPEG writes a w×h JPEG of noise (so that half of it is cut inside the image data) with the vips CLI and returns its path.
func makeJPEG(t *testing.T, w, h int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "input.jpg")
	cmd := exec.Command("vips", "gaussnoise", p, strconv.Itoa(w), strconv.Itoa(h))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("vips black: %v\n%s", err, out)
	}
	return p
}

// TestOperationsRunSideBySide: an operation in flight (holding the shared lock) does not stop
// another one from running; that is what keeps --max-image-jobs worth its cores. A mutex around every
// operation would deadlock here.
func TestOperationsRunSideBySide(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	src := makeJPEG(t, 640, 480)
	opLock.RLock() // a neighbour's decode, in progress
	done := make(chan error, 1)
	go func() {
		im, err := Thumbnail(src, 100, false, false)
		if err == nil {
			im.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		opLock.RUnlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		opLock.RUnlock()
		t.Fatal("a decode waited for another one in flight")
	}
}

// TestFailedOperationReadsOnlyItsOwnMessage: the repeat of a failed operation holds the lock alone,
// so a message another job leaves in libvips' buffer meanwhile is not taken for its own, and its
// own is not lost to another job's clear.
func TestFailedOperationReadsOnlyItsOwnMessage(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(makeJPEG(t, 640, 480))
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "input")
	if err := os.WriteFile(bad, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	good := makeJPEG(t, 640, 480)
	var (
		mu   sync.Mutex
		msgs = map[string]int{}
		wg   sync.WaitGroup
	)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 { // good decodes alongside, clearing the buffer as they start
				im, err := Thumbnail(good, 100, false, false)
				if err != nil {
					t.Errorf("good file: %v", err)
					return
				}
				im.Close()
				return
			}
			_, err := Thumbnail(bad, 100, false, false)
			var ve *Error
			if !errors.As(err, &ve) {
				t.Errorf("truncated jpeg: got %v, want an *Error", err)
				return
			}
			mu.Lock()
			msgs[ve.Msg]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(msgs) != 1 {
		t.Fatalf("one file, several messages: %v", msgs)
	}
	for m := range msgs {
		if m == "" || strings.Contains(m, bad) || strings.Contains(m, filepath.Dir(bad)) {
			t.Errorf("message %q is empty or names the scratch path", m)
		}
		t.Logf("truncated jpeg: %s", m)
	}
}
