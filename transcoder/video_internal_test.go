package transcoder

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The poster output's failures must be recognised in the wording of the ffmpeg versions we meet, and
// the MP4 output's must not be taken for them (that would hide a bad input behind a second encode).
func TestPosterOutputFailedWording(t *testing.T) {
	for msg, want := range map[string]bool{
		"Error initializing output stream 1:0 -- Error while opening encoder for output stream #1:0 - maybe incorrect parameters": true, // 5.1
		"[vost#1:0/mjpeg @ 0x55d0c0a8c2c0] Error while opening encoder - maybe incorrect parameters":                              true, // 6.1, 7
		"Error initializing output stream 2:0 -- Error while opening encoder for output stream #2:0":                              true, // the luma planes
		"[vost#2:0/pgm @ 0x55d0c0a8c2c0] Error while opening encoder":                                                             true,
		"Error initializing output stream 0:0 -- Error while opening encoder for output stream #0:0":                              false,
		"[vost#0:0/libx264 @ 0x55d0c0a8c2c0] Error while opening encoder":                                                         false,
		"Cannot allocate memory": false,
	} {
		if got := posterOutputFailed.MatchString(msg); got != want {
			t.Errorf("%q: matched %v, want %v", msg, got, want)
		}
	}
}

// Running out of address space shows in several wordings, depending on which allocation failed.
func TestOutOfMemoryWording(t *testing.T) {
	for msg, want := range map[string]bool{
		"Error while decoding stream #0:0: Cannot allocate memory":                                          true,
		"x264 [error]: malloc of size 4147200 failed":                                                       true,
		"get_buffer() failed; get_buffer() failed (-12 (nil)); Error submitting video frame to the encoder": true,
		"Invalid data found when processing input":                                                          false,
		"frame -120 is out of order":                                                                        false,
	} {
		if got := (&toolError{stderr: msg, exitCode: 1}).outOfMemory(); got != want {
			t.Errorf("%q: out of memory = %v, want %v", msg, got, want)
		}
	}
}

// A run killed at its CPU-time limit must be refused as over that limit, although wait4 may report
// less CPU time than the kernel counted when it killed it; a kill long before the limit (the OOM
// killer's) must not.
func TestCPULimitKillClassification(t *testing.T) {
	v := &toolRunner{cfg: DefaultVideoConfig()}
	cases := []struct {
		name string
		te   toolError
		want bool
	}{
		{"SIGKILL with wait4 short of the limit", toolError{exitCode: -1, signal: syscall.SIGKILL, cpuUsed: 920 * time.Millisecond, cpuLimit: time.Second}, true},
		{"SIGKILL past the limit", toolError{exitCode: -1, signal: syscall.SIGKILL, cpuUsed: 1040 * time.Millisecond, cpuLimit: time.Second}, true},
		{"SIGXCPU", toolError{exitCode: -1, signal: syscall.SIGXCPU, cpuUsed: 7150 * time.Second, cpuLimit: 2 * time.Hour}, true},
		{"SIGKILL early (OOM killer)", toolError{exitCode: -1, signal: syscall.SIGKILL, cpuUsed: 300 * time.Millisecond, cpuLimit: time.Second}, false},
		{"exit status at 0.92 s", toolError{exitCode: 1, cpuUsed: 920 * time.Millisecond, cpuLimit: time.Second}, false},
		{"exit status at the limit", toolError{exitCode: 255, cpuUsed: 990 * time.Millisecond, cpuLimit: time.Second}, true},
		{"no limit", toolError{exitCode: -1, signal: syscall.SIGKILL, cpuUsed: time.Hour}, false},
	}
	for _, tc := range cases {
		err := v.limitError("transcoding video", &tc.te)
		got := err != nil && strings.Contains(err.Error(), "needs more CPU time than the limit")
		if got != tc.want {
			t.Errorf("%s: got %v, want CPU limit = %v", tc.name, err, tc.want)
		}
	}
}

// Real kills at a 1 s CPU limit, several in a row (the CI flake was one kill in many): each is the
// CPU limit, a bad input.
func TestCPULimitKillsAreRecognised(t *testing.T) {
	cfg := DefaultVideoConfig()
	cfg.MaxCPUTime = time.Second
	v, err := NewVideos(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 3 {
		// An endless 1080p encode: only the limit stops it.
		args := []string{"-nostdin", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=s=1920x1080:r=25",
			"-c:v", "libx264", "-preset", "veryfast", "-threads", "2", "-f", "null", "-"}
		runErr := v.tools.run(ctx, t.TempDir(), v.tools.ffmpeg, args, nil, time.Second)
		err := v.tools.classifyFFmpeg(ctx, "transcoding video", runErr)
		var te *toolError
		errors.As(runErr, &te)
		if !IsBadInput(err) || !strings.Contains(err.Error(), "needs more CPU time than the limit of 1s") {
			t.Fatalf("run %d: %v (raw %+v), want the CPU limit", i, err, te)
		}
		t.Logf("run %d: killed by %v after %s of CPU", i, te.signal, te.cpuUsed)
	}
}
