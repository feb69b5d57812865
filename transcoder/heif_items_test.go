package transcoder_test

import (
	"context"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// A HEIF image coded in a way this libheif does not decode, should it reach the transcoder (its meta
// box beyond what detection reads), is refused in the words detection uses, not as having "no
// primary picture".
func TestImageHEIFUnsupportedCodingIsNamed(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	for variant, want := range map[string]string{
		"unci":       "reading image header: HEIF image with an unsupported coding (uncompressed, ISO/IEC 23001-17)",
		"j2k1":       "reading image header: HEIF image with an unsupported coding (JPEG 2000)",
		"compressed": "reading image header: HEIF image with an unsupported coding (compressed with deflate, zlib or brotli)",
	} {
		_, err := im.Transform(context.Background(), testenv.MakeHEIFVariant(t, dir, variant+".heif", variant), t.TempDir())
		if !transcoder.IsBadInput(err) || err.Error() != want {
			t.Errorf("%s: got %v, want %q", variant, err, want)
		}
	}
	// A HEIC it decodes is untouched.
	if _, err := im.Transform(context.Background(), testenv.MakeHEIC(t, dir, 64, 48), t.TempDir()); err != nil {
		t.Errorf("HEIC: %v", err)
	}
}
