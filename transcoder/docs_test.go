package transcoder

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The limits README.md and docs/contract.md promise next to the accepted formats, and the demuxer
// allow-list SECURITY.md states, are the defaults the code has: a default changed without the docs
// fails here. (Which formats are accepted is held to detection's allow-list in pipeline.)
func TestDocsStateTheFormatLimits(t *testing.T) {
	im, v := DefaultImageConfig(), DefaultVideoConfig()
	contract, readme, security := readOneLine(t, "../docs/contract.md"), readOneLine(t, "../README.md"), readOneLine(t, "../SECURITY.md")
	mp := func(pixels int64) string { return fmt.Sprintf("%d MP", pixels/1_000_000) }
	hours := func(d time.Duration) string {
		if d%time.Hour != 0 {
			return d.String() // not how the docs write it: the check fails and names the value
		}
		return fmt.Sprintf("%d h", d/time.Hour)
	}
	gib := func(n int64) string { return fmt.Sprintf("%d GiB", n>>30) }
	// The largest video frame, as the docs name it.
	frame, short := fmt.Sprintf("%d pixels", v.MaxPixels), fmt.Sprintf("%d pixels", v.MaxPixels)
	if v.MaxPixels == 7680*4320 {
		frame, short = "7680×4320", "8K"
	}
	for _, c := range []struct{ doc, name, text string }{
		{contract, "docs/contract.md", fmt.Sprintf("more than %s over all frames (width × height × frames, `--image-max-pixels`) or more than %d frames (`--image-max-frames`)",
			mp(im.MaxPixels), im.MaxFrames)},
		{contract, "docs/contract.md", fmt.Sprintf("within %d frames and %s over all frames of the high variant (`--image-animation-max-frames`, `--image-animation-max-pixels`)",
			im.AnimationMaxFrames, mp(im.AnimationMaxPixels))},
		{contract, "docs/contract.md", fmt.Sprintf("`--video-max-duration` (%s) long and %s per frame (`--video-max-pixels`)",
			hours(v.MaxDuration), frame)},
		{contract, "docs/contract.md", fmt.Sprintf("`--video-max-output-bytes` (%s), `--video-max-cpu-time` (%s) of CPU per ffmpeg run",
			gib(v.MaxOutputBytes), hours(v.MaxCPUTime))},
		{contract, "docs/contract.md", fmt.Sprintf("at most %dp on its short edge (`--video-max-height`)", v.MaxHeight)},
		{readme, "README.md", fmt.Sprintf("at most %s over all frames and %d frames (refused from the header)", mp(im.MaxPixels), im.MaxFrames)},
		{readme, "README.md", fmt.Sprintf("stay animated within %d frames and %s over the high variant's frames", im.AnimationMaxFrames, mp(im.AnimationMaxPixels))},
		{readme, "README.md", fmt.Sprintf("at most %s and %s, out as ≤ %dp H.264/AAC", hours(v.MaxDuration), short, v.MaxHeight)},
		{security, "SECURITY.md", "`-format_whitelist " + inputFormats + "`"},
	} {
		if !strings.Contains(c.doc, c.text) {
			t.Errorf("%s does not say %q (the code's default); update the doc", c.name, c.text)
		}
	}
}

// readOneLine reads a doc with its line breaks read as spaces, so that a sentence is found however
// it is wrapped.
func readOneLine(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}
