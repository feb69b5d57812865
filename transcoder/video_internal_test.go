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
