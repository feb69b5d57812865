package transcoder_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// fixtureDir holds media that several tests share (made once, on first use): the package's tests
// must stay well inside a minute on two cores, and the 10 s 1080p source is the slowest thing to make.
var fixtureDir string

func TestMain(m *testing.M) {
	// The document renderer re-executes its program as the render child: here, this test binary.
	if len(os.Args) > 1 && os.Args[1] == "render-document" {
		os.Exit(transcoder.RenderDocumentMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	// The same on a kernel without Landlock (its calls answer ENOSYS): the degraded renderer.
	if len(os.Args) > 1 && os.Args[1] == "render-document-without-landlock" {
		if err := testenv.WithoutLandlock(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(transcoder.RenderDocumentMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	dir, err := os.MkdirTemp("", "transcoder-fixtures-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	source1080pOnce sync.Once
	source1080p     string
)

// source1080p10s returns a 10 s 1920×1080 25 fps MOV (H.264 + AAC), as a phone or camera would upload.
func source1080p10s(t *testing.T) string {
	t.Helper()
	source1080pOnce.Do(func() {
		source1080p = testenv.MakeVideo(t, fixtureDir, "source1080p.mov", testenv.VideoOpts{
			Width: 1920, Height: 1080, Seconds: 10, FPS: 25, VCodec: "h264", ACodec: "aac", Container: "mov",
		})
	})
	if source1080p == "" {
		t.Fatal("making the 1080p source failed in an earlier test")
	}
	return source1080p
}
