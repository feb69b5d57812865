package pipeline

import (
	"context"
	"os"
	"testing"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// TestHDRStillSaysHDR: an HDR AVIF still (BT.2020 PQ) is answered with metadata.hdr "pq", as an
// HDR video is, in a response the schema takes; an SDR still says nothing of it.
func TestHDRStillSaysHDR(t *testing.T) {
	images, err := transcoder.NewImages(transcoder.DefaultImageConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, path, hdr string
	}{
		{"pq avif", testenv.MakeHDRStill(t, dir, "hdr.avif", "avif", "pq", 203, testenv.SDRPattern(64, 48)), "pq"},
		{"sdr jpeg", testenv.MakeJPEG(t, dir, 64, 48), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			data, err := os.ReadFile(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			f.store.objs["media/u/p.jpg"] = data
			p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: images, Videos: fakeVideos{}})
			if err != nil {
				t.Fatal(err)
			}
			out := p.Process(context.Background(), f.req, "")
			if out.Kind != Success {
				t.Fatalf("got %s (%v), want success", out.Kind, out.Err)
			}
			if err := contracts.Validate(contracts.SchemaResponse, out.Response); err != nil {
				t.Errorf("response fails the schema: %v", err)
			}
			if got := out.Response.Metadata.HDR; got != tc.hdr {
				t.Errorf("metadata.hdr %q, want %q", got, tc.hdr)
			}
		})
	}
}
