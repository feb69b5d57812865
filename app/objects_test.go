package app_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
)

func fetchURL(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// /objects serves the variants the worker wrote, as what they are, and nothing else: not the
// original, not a quarantined file, not an HTML page uploaded as page.jpg, not an object someone else
// put under a variant's key, not a path that climbs out.
func TestObjectsServeOnlyVariants(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) { c.Pipeline.QuarantineBucket = "quarantine" })
	base := "http://" + w.app.HTTPAddr() + "/objects/"
	media := t.TempDir()

	id := w.request(w.upload(testenv.MakeJPEG(t, media, 1600, 1200), "site/p.jpg"))
	r := w.await(id, time.Minute)
	if !r.Success || len(r.Processed) != 3 {
		t.Fatalf("want success with 3 variants, got %+v", r)
	}
	for _, v := range r.Processed {
		resp, body := fetchURL(t, v.URL, nil)
		h := resp.Header
		if resp.StatusCode != 200 || int64(len(body)) != v.Size || h.Get("Content-Type") != "image/webp" ||
			h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") ||
			h.Get("ETag") == "" || h.Get("Accept-Ranges") != "bytes" {
			t.Fatalf("GET %s: %s, %d bytes, headers %v", v.URL, resp.Status, len(body), h)
		}
		p := filepath.Join(t.TempDir(), "v.webp")
		_ = os.WriteFile(p, body, 0o600)
		if info := testenv.DecodeImage(t, p); info.Loader != "webpload" {
			t.Errorf("%s decodes as %s", v.URL, info.Loader)
		}
		// Conditional and ranged GETs, as browsers and CDNs send them.
		if resp, _ := fetchURL(t, v.URL, map[string]string{"If-None-Match": h.Get("ETag")}); resp.StatusCode != http.StatusNotModified {
			t.Errorf("If-None-Match: %s, want 304", resp.Status)
		}
		resp, part := fetchURL(t, v.URL, map[string]string{"Range": "bytes=10-99"})
		if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, body[10:100]) {
			t.Errorf("Range 10-99: %s, %d bytes", resp.Status, len(part))
		}
	}

	// The original (a real JPEG) is not served, and neither is an original a browser would render.
	html := filepath.Join(media, "page.jpg")
	_ = os.WriteFile(html, []byte("<html><body><script>alert(document.cookie)</script></body></html>"), 0o600)
	htmlID := w.request(w.upload(html, "site/page.jpg"))
	if r := w.await(htmlID, time.Minute); r.Success {
		t.Fatalf("an HTML page was processed: %+v", r)
	}
	eicar := filepath.Join(media, "e.txt")
	_ = os.WriteFile(eicar, []byte(testenv.EICAR), 0o600)
	virusID := w.request(w.upload(eicar, "site/e.png"))
	if r := w.await(virusID, time.Minute); r.Success {
		t.Fatalf("EICAR was processed: %+v", r)
	}
	// Someone with write access to the bucket stores their own bytes under a variant's key: no marker.
	forged := contracts.KeysFor(contracts.Request{S3Key: "site/x.jpg", MediaID: uuid.NewString()}).Image("high")
	if err := w.store.Put(context.Background(), w.bucket, forged, strings.NewReader("<script>1</script>"), -1, "text/html"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"media/site/p.jpg", "media/site/page.jpg", "quarantine/site/e.png", "media/" + forged,
		"media/site/../site/p.jpg", "media/site/%2e%2e/site/p.jpg", "media/%2e%2e/%2e%2e/etc/passwd",
		"media/site/images/" + id + "/..%2f..%2fp.jpg", "..%2fmedia/site/p.jpg", "quarantine/../media/site/p.jpg",
	} {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.URL.Opaque = "//" + req.URL.Host + "/objects/" + path // sent as written, not cleaned by the client
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || bytes.Contains(body, []byte("<script>")) || bytes.Contains(body, []byte("EICAR")) {
			t.Errorf("GET /objects/%s: %s (%d bytes), want it refused", path, resp.Status, len(body))
		}
	}
}

// An MP4 variant over many chunks: conditional requests by its ETag, and ranges deep into it, come back
// exactly, and the handler leaves no stream behind.
func TestObjectsRangeOverChunks(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, nil)
	data := make([]byte, 3<<20+12345) // ~25 object-store chunks
	_, _ = rand.Read(data)
	key := contracts.KeysFor(contracts.Request{S3Key: "v/clip.mov", MediaID: uuid.NewString()}).Video()
	if err := w.store.Put(objstore.AsVariant(context.Background()), w.bucket, key, bytes.NewReader(data), int64(len(data)), "video/mp4"); err != nil {
		t.Fatal(err)
	}
	url := "http://" + w.app.HTTPAddr() + "/objects/" + w.bucket + "/" + key
	resp, body := fetchURL(t, url, nil)
	if resp.StatusCode != 200 || !bytes.Equal(body, data) || resp.Header.Get("Content-Type") != "video/mp4" {
		t.Fatalf("full GET: %s, %d bytes, %s", resp.Status, len(body), resp.Header.Get("Content-Type"))
	}
	// A player's or CDN's revalidation and resumed range: the ETag is stable, If-None-Match answers 304,
	// and If-Range with it still gets the part (with a stale one, the whole file).
	etag := resp.Header.Get("ETag")
	if again, _ := fetchURL(t, url, map[string]string{"Range": "bytes=0-0"}); etag == "" || again.Header.Get("ETag") != etag {
		t.Errorf("ETag %q, then %q: want one stable ETag", etag, again.Header.Get("ETag"))
	}
	if resp, _ := fetchURL(t, url, map[string]string{"If-None-Match": etag}); resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: %s, want 304", resp.Status)
	}
	if resp, part := fetchURL(t, url, map[string]string{"Range": "bytes=100-199", "If-Range": etag}); resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, data[100:200]) {
		t.Errorf("If-Range with the current ETag: %s, %d bytes", resp.Status, len(part))
	}
	if resp, all := fetchURL(t, url, map[string]string{"Range": "bytes=100-199", "If-Range": `"stale"`}); resp.StatusCode != 200 || len(all) != len(data) {
		t.Errorf("If-Range with a stale ETag: %s, %d bytes, want the whole file", resp.Status, len(all))
	}
	for _, rg := range [][2]int{{0, 0}, {2<<20 + 7, 2<<20 + 300000}, {len(data) - 10, len(data) - 1}} {
		resp, part := fetchURL(t, url, map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", rg[0], rg[1])})
		if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, data[rg[0]:rg[1]+1]) {
			t.Errorf("Range %d-%d: %s, %d bytes", rg[0], rg[1], resp.Status, len(part))
		}
	}
	// Two ranges in one request: the reader seeks back.
	resp, multi := fetchURL(t, url, map[string]string{"Range": "bytes=3000000-3000009,5-9"})
	if resp.StatusCode != http.StatusPartialContent || !bytes.Contains(multi, data[3000000:3000010]) || !bytes.Contains(multi, data[5:10]) {
		t.Errorf("multi-range: %s, %d bytes", resp.Status, len(multi))
	}
}

// With --url-signing-key, response URLs are signed and expire, and /objects serves nothing else.
func TestObjectsSignedURLs(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef-test"
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) { c.URLSigning.Key, c.URLSigning.TTL = secret, time.Hour })
	id := w.request(w.upload(testenv.MakeJPEG(t, t.TempDir(), 800, 600), "s/p.jpg"))
	r := w.await(id, time.Minute)
	if !r.Success || len(r.Processed) != 3 {
		t.Fatalf("%+v", r)
	}
	high, low := variant(t, r, "high").URL, variant(t, r, "low").URL
	if !strings.Contains(high, "?expires=") || !strings.Contains(high, "&signature=") {
		t.Fatalf("response URL is not signed: %s", high)
	}
	if resp, _ := fetchURL(t, high, nil); resp.StatusCode != 200 {
		t.Fatalf("signed URL: %s", resp.Status)
	}
	unsigned, query, _ := strings.Cut(high, "?")
	_, lowQuery, _ := strings.Cut(low, "?")
	keyHigh := contracts.KeysFor(contracts.Request{S3Key: "s/p.jpg", MediaID: id}).Image("high")
	for name, u := range map[string]string{
		"unsigned":             unsigned,
		"another key's sig":    unsigned + "?" + lowQuery,
		"tampered":             unsigned + "?" + strings.Replace(query, "signature=", "signature=A", 1),
		"expired":              app.SignObjectURL(secret, unsigned, keyHigh, time.Now().Add(-time.Minute)),
		"another secret's sig": app.SignObjectURL(strings.Repeat("x", 40), unsigned, keyHigh, time.Now().Add(time.Hour)),
	} {
		if resp, _ := fetchURL(t, u, nil); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %s, want 403", name, resp.Status)
		}
	}
	if resp, _ := fetchURL(t, app.SignObjectURL(secret, unsigned, keyHigh, time.Now().Add(time.Minute)), nil); resp.StatusCode != 200 {
		t.Errorf("a URL the API signed itself: %s", resp.Status)
	}
}

// With S3 the bucket is private (compose's MinIO answers 403 to an anonymous GET), so with URL signing
// on the worker serves the variants itself: --public-base-url pointing at its /objects/<bucket> gives
// answers whose URLs fetch 200, and the same path unsigned, or an original, is refused.
func TestObjectsServedFromS3WhenSigned(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef-s3"
	clamd := testenv.StartClamd(t)
	addr := testenv.FreeAddr(t)
	w := startWorld(t, app.StorageS3, clamd, func(c *app.Config) {
		c.HTTPAddr = addr
		c.URLSigning.Key, c.URLSigning.TTL = secret, time.Hour
		c.Pipeline.PublicBaseURL = "http://" + addr + "/objects/media"
	})
	id := w.request(w.upload(testenv.MakeJPEG(t, t.TempDir(), 800, 600), "s/p.jpg"))
	r := w.await(id, time.Minute)
	if !r.Success || len(r.Processed) != 3 {
		t.Fatalf("%+v", r)
	}
	for _, v := range r.Processed {
		resp, body := fetchURL(t, v.URL, nil)
		if resp.StatusCode != 200 || int64(len(body)) != v.Size || resp.Header.Get("Content-Type") != "image/webp" {
			t.Errorf("variant %s: %s, %d bytes of %d", v.URL, resp.Status, len(body), v.Size)
		}
	}
	unsigned, _, _ := strings.Cut(variant(t, r, "high").URL, "?")
	if resp, _ := fetchURL(t, unsigned, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("unsigned: %s, want 403", resp.Status)
	}
	if resp, _ := fetchURL(t, "http://"+addr+"/objects/media/s/p.jpg", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the original: %s, want 404", resp.Status)
	}
}
