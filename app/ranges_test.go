package app_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
)

// objectsWorker runs a worker whose NATS server the test holds, so it can count what /objects reads
// from the store: the bytes the server sent its clients. It returns the URL of a variant of size
// pseudo-random bytes the worker serves, and those bytes.
func objectsWorker(t *testing.T, size int) (srv *server.Server, url string, data []byte) {
	t.Helper()
	srv = testenv.StartNATS(t)
	clamd := testenv.StartClamd(t)
	cfg := app.DefaultConfig()
	cfg.NATS.URL = srv.ClientURL()
	cfg.Scanner.Addr = clamd.Addr
	cfg.Pipeline.TmpDir = t.TempDir()
	cfg.HTTPAddr = "127.0.0.1:0"
	a := runApp(t, cfg, zerolog.WarnLevel)

	js, err := jetstream.New(testenv.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	store, err := app.OpenStore(context.Background(), cfg, js)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.EnsureBucket(context.Background(), "media"); err != nil {
		t.Fatal(err)
	}
	data = make([]byte, size)
	for i := range data {
		data[i] = byte(i*131 + i>>11)
	}
	key := contracts.KeysFor(contracts.Request{S3Key: "v/clip.mov", MediaID: uuid.NewString()}).Video()
	if err := store.Put(objstore.AsVariant(context.Background()), "media", key, bytes.NewReader(data), int64(size), "video/mp4"); err != nil {
		t.Fatal(err)
	}
	return srv, "http://" + a.HTTPAddr() + "/objects/media/" + key, data
}

// sentBytes is what the NATS server has sent its clients so far; the HTTP client is not one of them,
// so across a request it is what the worker read from the store (and a little idle traffic).
func sentBytes(t *testing.T, srv *server.Server) int64 {
	t.Helper()
	v, err := srv.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	return v.OutBytes
}

// byteParts reads a multipart/byteranges answer: each part's Content-Range and bytes.
func byteParts(t *testing.T, resp *http.Response, body []byte) map[string][]byte {
	t.Helper()
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/byteranges" {
		t.Fatalf("Content-Type %q, want multipart/byteranges", resp.Header.Get("Content-Type"))
	}
	parts := map[string][]byte{}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return parts
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		parts[p.Header.Get("Content-Range")] = b
	}
}

// Issue #24 item 6: ranges on /objects are bounded. A range near the end of a large MP4 costs that
// range, not the object up to there (counted in bytes the NATS server sent, never in time); a request
// for many ranges, or overlapping ones, is answered whole with 200 at the cost of one read; one range
// and a few (out of order too) still come back exactly.
func TestObjectsRangesAreBounded(t *testing.T) {
	const size = 6<<20 + 4321 // 49 object-store chunks
	srv, url, data := objectsWorker(t, size)
	get := func(rng string) (*http.Response, []byte, int64) {
		t.Helper()
		before := sentBytes(t, srv)
		var hdr map[string]string
		if rng != "" {
			hdr = map[string]string{"Range": rng}
		}
		resp, body := fetchURL(t, url, hdr)
		return resp, body, sentBytes(t, srv) - before
	}

	resp, body, whole := get("")
	if resp.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Fatalf("whole object: %s, %d bytes", resp.Status, len(body))
	}
	t.Logf("the whole object: %d bytes from NATS", whole)

	// The end of the object: a player reading an MP4's index. Before, this read all 6 MiB.
	for _, rng := range []string{fmt.Sprintf("bytes=%d-", size-10), "bytes=-10", fmt.Sprintf("bytes=%d-%d", 3<<20, 3<<20+999)} {
		resp, body, read := get(rng)
		start, end := size-10, size
		if strings.HasPrefix(rng, "bytes=3") {
			start, end = 3<<20, 3<<20+1000
		}
		if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, data[start:end]) {
			t.Errorf("%s: %s, %d bytes", rng, resp.Status, len(body))
		}
		if read > size/8 {
			t.Errorf("%s read %d bytes from the store for %d: it reads from the object's start", rng, read, end-start)
		}
		t.Logf("%s: %d bytes from NATS", rng, read)
	}

	// 400 one-byte ranges: answered whole, once.
	var many []string
	for i := range 400 {
		off := i * (size / 400)
		many = append(many, fmt.Sprintf("%d-%d", off, off))
	}
	resp, body, read := get("bytes=" + strings.Join(many, ","))
	if resp.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Errorf("400 ranges: %s, %d bytes, want 200 with the whole object", resp.Status, len(body))
	}
	if read > whole+whole/4 {
		t.Errorf("400 ranges read %d bytes from the store, the whole object takes %d", read, whole)
	}
	t.Logf("400 ranges: %s, %d bytes from NATS", resp.Status, read)

	// Nine ranges, and overlapping ones: whole. Eight: served.
	nine := "bytes=" + strings.Join(many[:9], ",")
	for _, rng := range []string{nine, "bytes=0-99,50-149", "bytes=-100,-50", "bytes=10-20,0-10"} {
		if resp, body, _ := get(rng); resp.StatusCode != 200 || !bytes.Equal(body, data) {
			t.Errorf("%s: %s, %d bytes, want 200 with the whole object", rng, resp.Status, len(body))
		}
	}
	resp, body, read = get("bytes=" + strings.Join(many[:8], ","))
	if parts := byteParts(t, resp, body); resp.StatusCode != http.StatusPartialContent || len(parts) != 8 {
		t.Errorf("8 ranges: %s, %d parts", resp.Status, len(parts))
	}
	if read > size/4 {
		t.Errorf("8 ranges read %d bytes from the store", read)
	}

	// Two ranges, out of order, one near the end: the right bytes in each part.
	a, b := [2]int{size - 300, size - 201}, [2]int{5, 9}
	resp, body, _ = get(fmt.Sprintf("bytes=%d-%d,%d-%d", a[0], a[1], b[0], b[1]))
	parts := byteParts(t, resp, body)
	for _, r := range [][2]int{a, b} {
		cr := fmt.Sprintf("bytes %d-%d/%d", r[0], r[1], size)
		if !bytes.Equal(parts[cr], data[r[0]:r[1]+1]) {
			t.Errorf("part %s: %d bytes, want %d right ones (parts: %d)", cr, len(parts[cr]), r[1]-r[0]+1, len(parts))
		}
	}
	// A header net/http cannot parse is refused by it, as before.
	if resp, _, _ := get("bytes=abc"); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("bytes=abc: %s, want 416", resp.Status)
	}

	// Issue 31: a suffix of length 0 is unsatisfiable (RFC 9110 §14.1.1). net/http answered it 206
	// with an inverted Content-Range ("bytes N-(N-1)/N").
	for _, rng := range []string{"bytes=-0", "bytes=-0,-0", fmt.Sprintf("bytes=-0,%d-", size)} {
		resp, body, _ := get(rng)
		if cr, want := resp.Header.Get("Content-Range"), fmt.Sprintf("bytes */%d", size); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || cr != want {
			t.Errorf("%s: %s, Content-Range %q, %d bytes; want 416 with %q", rng, resp.Status, cr, len(body), want)
		}
	}
	// Beside a satisfiable range it is dropped: the other range is served alone.
	resp, body, _ = get("bytes=-0,0-9")
	if cr, want := resp.Header.Get("Content-Range"), fmt.Sprintf("bytes 0-9/%d", size); resp.StatusCode != http.StatusPartialContent || cr != want || !bytes.Equal(body, data[:10]) {
		t.Errorf("bytes=-0,0-9: %s, Content-Range %q, %d bytes; want 206 with %q and the first 10 bytes", resp.Status, cr, len(body), want)
	}
}
