package transcoder

import "testing"

// The poster output's failures must be recognised in the wording of the ffmpeg versions we meet, and
// the MP4 output's must not be taken for them (that would hide a bad input behind a second encode).
func TestPosterOutputFailedWording(t *testing.T) {
	for msg, want := range map[string]bool{
		"Error initializing output stream 1:0 -- Error while opening encoder for output stream #1:0 - maybe incorrect parameters": true, // 5.1
		"[vost#1:0/mjpeg @ 0x55d0c0a8c2c0] Error while opening encoder - maybe incorrect parameters":                              true, // 6.1, 7
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
