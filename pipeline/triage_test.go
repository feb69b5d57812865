package pipeline

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
)

// mp4Head is the start of an ISO BMFF file: content detection says video/mp4.
var mp4Head = append([]byte{0, 0, 0, 0x18, 'f', 't', 'y', 'p', 'i', 's', 'o', 'm', 0, 0, 2, 0, 'i', 's', 'o', 'm', 'm', 'p', '4', '1'}, make([]byte, 64)...)

func TestTriageRoutesByTheSniffedHead(t *testing.T) {
	cases := []struct {
		name      string
		setup     func(*fixture)
		kind      Kind
		lane      MediaKind
		errSubstr string
	}{
		{"jpeg", func(*fixture) {}, Route, Image, ""},
		{"mp4", func(f *fixture) { f.store.objs["media/u/p.jpg"] = mp4Head }, Route, Video, ""},
		// Not media, but scanned before it is refused (an infected one is reported and removed): the
		// cheap lane downloads, scans and refuses it.
		{"pdf", func(f *fixture) { f.store.objs["media/u/p.jpg"] = []byte("%PDF-1.4\n%%EOF\n") }, Route, Image, ""},
		{"missing", func(f *fixture) { delete(f.store.objs, "media/u/p.jpg") }, Failed, "", "not found"},
		{"empty", func(f *fixture) { f.store.objs["media/u/p.jpg"] = nil }, Failed, "", "object is empty"},
		{"too large", func(f *fixture) { f.cfg.MaxInputBytes = 10 }, Failed, "", "input is too large"},
		{"store down", func(f *fixture) {
			f.store.failGet = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}, Retry, "", "downloading: the object store could not be reached"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(f)
			p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}})
			if err != nil {
				t.Fatal(err)
			}
			out := p.Triage(context.Background(), f.req)
			if out.Kind != tc.kind || out.MediaKind != tc.lane && tc.kind == Route {
				t.Fatalf("outcome %s to %q (err %v), want %s to %q", out.Kind, out.MediaKind, out.Err, tc.kind, tc.lane)
			}
			if tc.errSubstr != "" && !strings.Contains(out.Response.Error, tc.errSubstr) {
				t.Errorf("error %q does not mention %q", out.Response.Error, tc.errSubstr)
			}
			if f.scan.scanned || f.images.called {
				t.Error("triage scanned or transformed")
			}
		})
	}
}

// A lane job re-detects after the download: an image that reached the video lane is routed to the
// image lane, never transformed in the video pool.
func TestLaneMismatchIsRerouted(t *testing.T) {
	f := newFixture(t)
	p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}})
	if err != nil {
		t.Fatal(err)
	}
	out := p.Process(context.Background(), f.req, Video)
	if out.Kind != Route || out.MediaKind != Image || f.images.called || !f.scan.scanned {
		t.Fatalf("outcome %s to %q, transformed %v, scanned %v; want route to image, scanned, not transformed", out.Kind, out.MediaKind, f.images.called, f.scan.scanned)
	}
	if out := p.Process(context.Background(), f.req, Image); out.Kind != Success {
		t.Fatalf("in its own lane: %s (%v)", out.Kind, out.Err)
	}
}
