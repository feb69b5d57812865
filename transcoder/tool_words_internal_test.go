package transcoder

import (
	"context"
	"errors"
	"testing"
)

// ffmpeg reports the machine's failures only on its stderr; the transcoder, which reads it, says them
// in Words where it makes the error (issue 32 item 4), so nothing after it reads a tool's words.
func TestFFmpegSystemFailureWords(t *testing.T) {
	tr := &toolRunner{cfg: DefaultVideoConfig()}
	for stderr, want := range map[string]string{
		"[out#0/mp4 @ 0x55d0c0a8c2c0] Error writing trailer of file:/tmp/x/video.mp4: No space left on device": "the scratch disk is full",
		"av_interleaved_write_frame(): Input/output error":                                                     "the scratch disk failed (a read or write error)",
		"ffmpeg: error while loading shared libraries: libx264.so: cannot map":                                 "a media tool could not be started",
		"moov atom not found": "", // the input's fault: bad input, no Words
	} {
		err := tr.classifyFFmpeg(context.Background(), "transcoding video", &toolError{stderr: stderr, exitCode: 1})
		var te *Error
		if !errors.As(err, &te) {
			t.Fatalf("%q: %v, want a transcoder Error", stderr, err)
		}
		if te.Words != want || te.BadInput != (want == "") {
			t.Errorf("%q: Words %q (bad input %v), want %q", stderr, te.Words, te.BadInput, want)
		}
	}
}
