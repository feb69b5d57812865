package faults

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Issue 20's judged case against the built binary: the same 12 MP photo uploaded again under a new key
// is answered "reused" in less than a quarter of the first one's time, scanned by clamd like every
// upload (its own log counts the scans; issue 31 item 2), with variants at the new keys that decode;
// after a signature reload the same bytes are scanned again; infected bytes seen before are scanned
// again, answered infected and the new object removed. Every answer carries the asset's facts and
// passes both schemas (the ledger checks every event).
func TestRepeatedUploadsAreReused(t *testing.T) {
	clamd := testenv.StartClamdWith(t, map[string]string{"LogClean": "yes"})
	testenv.InstallDailyDatabase(clamd, 27000, time.Now().Add(-time.Hour))
	srv := testenv.StartNATS(t)
	w := startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, args: []string{"--no-reuse=false"}})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	photo := testenv.MakeJPEG(t, t.TempDir(), 4000, 3000)

	// clamd logs each scan a moment after it answers, and its log reaches the test through a copying
	// goroutine: a count read at once can be one short.
	logged := func(verdict string, want int) int {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(clamd.Log(), verdict) < want && time.Now().Before(deadline) {
			time.Sleep(25 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // and no more than that: an extra scan would show by now
		return strings.Count(clamd.Log(), verdict)
	}
	scans := func() int { return strings.Count(clamd.Log(), ": OK") }
	awaitScans := func(want int) int { return logged(": OK", want) }
	// An answer's time is taken when it arrives, not at the ledger's next 25 ms poll of the stream: a
	// reused answer takes about as long as one poll, and was measured at one or two of them.
	answers := make(chan *nats.Msg, 64)
	sub, err := l.nc.ChanSubscribe(streams.Subjects().Response, answers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	timed := func(key string) (contracts.Response, time.Duration) {
		t.Helper()
		c.upload(photo, key)
		start := time.Now()
		id := c.request(key)
		var took time.Duration
		for took == 0 {
			select {
			case m := <-answers:
				var r contracts.Response
				if json.Unmarshal(m.Data, &r) == nil && r.MediaID == id {
					took = time.Since(start)
				}
			case <-time.After(2 * time.Minute):
				t.Fatalf("%s: no answer within 2m", key)
			}
		}
		l.await([]string{id}, time.Minute)
		r := l.one(id)
		if !r.Success || len(r.Processed) != 3 {
			t.Fatalf("%s: %+v", key, r)
		}
		return r, took
	}

	first, firstTook := timed("u/first.jpg")
	md := first.Metadata
	if md == nil || md.Reused || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(md.SHA256) || md.ThumbHash == "" ||
		!regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(md.PHash) || !regexp.MustCompile(`^#[0-9a-f]{6}$`).MatchString(md.DominantColor) {
		t.Fatalf("first answer's metadata: %+v", md)
	}
	before := awaitScans(1)
	if before < 1 {
		t.Fatalf("clamd's log shows no scan of the first upload:\n%s", clamd.Log())
	}

	again, againTook := timed("u/again.jpg")
	if again.Metadata == nil || !again.Metadata.Reused || again.Metadata.SHA256 != md.SHA256 || again.Metadata.PHash != md.PHash {
		t.Fatalf("second upload of the same bytes: metadata %+v", again.Metadata)
	}
	if n := awaitScans(before + 1); n != before+1 {
		t.Errorf("clamd scanned %d more time(s) for the reused upload, want 1: every upload is scanned", n-before)
	}
	// What reuse saves is the transform: the reused job never entered that stage.
	if n := metric(t, w, `mediaworker_stage_duration_seconds_count{kind="image",stage="transforming"}`); n != 1 {
		t.Errorf("%v image transforms after a photo and its reuse, want 1", n)
	}
	if againTook*4 >= firstTook {
		t.Errorf("the reused answer took %s, the first %s: want less than a quarter", againTook, firstTook)
	}
	t.Logf("first answer in %s, reused in %s (%.1f×)", firstTook, againTook, float64(firstTook)/float64(againTook))
	// A reused photo is still an image to the operator's dashboards (it once counted as "unknown"). The
	// count is made once the delivery is acked, a moment after the answer is out.
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := metric(t, w, `mediaworker_jobs_total{kind="image",outcome="success"}`); n != 2 {
			return fmt.Errorf("mediaworker_jobs_total{kind=\"image\",outcome=\"success\"} = %v after a photo and its reuse, want 2", n)
		}
		return nil
	})
	for i, v := range again.Processed {
		key := keyOf(t, v.URL)
		if !strings.Contains(key, again.MediaID) || v.Quality != first.Processed[i].Quality || v.Width != first.Processed[i].Width {
			t.Errorf("reused variant %d: %+v (first: %+v)", i, v, first.Processed[i])
		}
		img := vipsDecode(t, c.get(key), "webp")
		if b := img.Bounds(); b.Dx() != v.Width || b.Dy() != v.Height {
			t.Errorf("reused variant %s decodes at %v, the answer says %d×%d", v.Quality, b, v.Width, v.Height)
		}
	}

	// New signatures: the same bytes are scanned again.
	testenv.InstallDailyDatabase(clamd, 27001, time.Now())
	before = scans()
	timed("u/after-reload.jpg")
	if n := awaitScans(before + 1); n != before+1 {
		t.Errorf("clamd scanned %d time(s) after its reload, want 1:\n%s", n-before, clamd.Log())
	}

	// Infected bytes seen before: scanned again, answered infected again, the new object removed.
	eicar := filepath.Join(t.TempDir(), "eicar.txt")
	if err := os.WriteFile(eicar, []byte(testenv.EICAR), 0o600); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, key := range []string{"u/e1.txt", "u/e2.txt"} {
		c.upload(eicar, key)
		id := c.request(key)
		l.await([]string{id}, time.Minute)
		ids = append(ids, id)
		if key == "u/e1.txt" {
			before = logged("FOUND", 1)
		}
	}
	if n := logged("FOUND", before+1); n != before+1 {
		t.Errorf("clamd found the second EICAR upload %d time(s), want 1", n-before)
	}
	for i, id := range ids {
		r := l.one(id)
		if r.Success || !strings.Contains(r.Error, "virus detected: "+testenv.EICARSignature) || len(l.viruses[id]) != 1 {
			t.Errorf("EICAR upload %d: %+v, %d virus events", i+1, r, len(l.viruses[id]))
		}
	}
	if c.exists("u/e2.txt") {
		t.Error("the second infected upload is still in the bucket")
	}
}

// ---------------------------------------------------------------------------------------------------
// Issue 31: what reuse promises (SECURITY.md, "Requests and neighbours"; docs/contract.md).

// reuseWorker runs a worker with the reuse memory on (the fault suite's workers run without it).
func reuseWorker(t *testing.T, name string, o workerOpts, args ...string) *workerProc {
	t.Helper()
	o.args = append([]string{"--no-reuse=false"}, args...)
	return startWorker(t, name, o)
}

// flatPNG writes a 400×300 PNG of one grey level. Flat pictures (placeholders, icons) compress to
// variants of equal size: the default recipe's three WebP variants of grey 6 and of grey 255 are 348,
// 346 and 344 bytes each, with different bytes.
func flatPNG(t *testing.T, grey uint8) string {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, 400, 300))
	for i := range img.Pix {
		img.Pix[i] = grey
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return writeFile(t, t.TempDir(), fmt.Sprintf("grey%d.png", grey), b.Bytes())
}

// meanGrey is the mean of a decoded picture's red channel, 0-255.
func meanGrey(img image.Image) float64 {
	b := img.Bounds()
	var sum float64
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, _, _, _ := img.At(x, y).RGBA()
			sum += float64(r >> 8)
		}
	}
	return sum / float64(b.Dx()*b.Dy())
}

// responses returns every response of id in the stream, in order, once there are at least n.
func (l *ledger) responsesOf(id string, n int, timeout time.Duration) []contracts.Response {
	l.t.Helper()
	var rs []contracts.Response
	testenv.Eventually(l.t, timeout, func() error {
		if err := l.sync(); err != nil {
			return err
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if rs = append([]contracts.Response(nil), l.responses[id]...); len(rs) < n {
			return fmt.Errorf("%s: %d of %d responses", id, len(rs), n)
		}
		return nil
	})
	return rs
}

// Item 1: a remembered output is handed out only while the stored object is the one the worker wrote.
// A request re-published under the same mediaId and key, for a different picture whose variants have
// the same sizes, makes the worker overwrite the remembered variants; a later upload of the first
// picture must get its own variants (made afresh), not the second picture's.
func TestReuseHandsOutOnlyTheBytesItStored(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	reuseWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	dark, light := flatPNG(t, 6), flatPNG(t, 255)

	c.upload(dark, "u/flat.png")
	req := testenv.NewRequest(bucket, "u/flat.png")
	testenv.PublishRequest(t, c.js, streams.Subjects().Request, req, jetstream.WithExpectStream(streams.RequestsStream()))
	first := l.responsesOf(req.MediaID, 1, time.Minute)[0]
	if !first.Success || len(first.Processed) != 3 {
		t.Fatalf("the dark picture: %+v", first)
	}

	// The same request again (a retry of the API's), now for the light picture: same mediaId, same
	// keys, variants of the same sizes written over the dark ones.
	c.upload(light, "u/flat.png")
	data, _ := json.Marshal(req)
	testenv.PublishRaw(t, c.js, streams.Subjects().Request, data, req.MediaID+"-again", jetstream.WithExpectStream(streams.RequestsStream()))
	second := l.responsesOf(req.MediaID, 2, time.Minute)[1]
	if !second.Success || len(second.Processed) != 3 {
		t.Fatalf("the light picture: %+v", second)
	}
	for i, v := range second.Processed {
		if v.Size != first.Processed[i].Size || keyOf(t, v.URL) != keyOf(t, first.Processed[i].URL) {
			t.Fatalf("the case needs variants of equal size at the same keys: %+v and %+v", first.Processed[i], v)
		}
	}
	if g := meanGrey(vipsDecode(t, c.get(keyOf(t, second.Processed[0].URL)), "webp")); g < 200 {
		t.Fatalf("the light picture's variant is grey %.0f", g)
	}

	// The dark picture again, under a new key: its own variants, never the light ones.
	c.upload(dark, "u/dark-again.png")
	id := c.request("u/dark-again.png")
	l.await([]string{id}, time.Minute)
	r := l.one(id)
	if !r.Success || len(r.Processed) != 3 {
		t.Fatalf("the dark picture again: %+v", r)
	}
	if r.Metadata == nil || r.Metadata.Reused {
		t.Errorf("the dark picture again was answered as reused, though its remembered variants were overwritten: %+v", r.Metadata)
	}
	for _, v := range r.Processed {
		if g := meanGrey(vipsDecode(t, c.get(keyOf(t, v.URL)), "webp")); g > 50 {
			t.Errorf("the dark picture's %s variant is grey %.0f: another picture's bytes", v.Quality, g)
		}
	}
}

// Item 2: a repeat is scanned against the signatures clamd has now, also those that leave its daily
// version alone: a site's own .hdb hash list, reloaded. The repeat of a picture clamd now calls
// infected is answered infected and removed, not from memory.
func TestReuseNeverSkipsTheScan(t *testing.T) {
	clamd := testenv.StartClamdWith(t, map[string]string{"LogClean": "yes"})
	srv := testenv.StartNATS(t)
	reuseWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	photo := testenv.MakeJPEG(t, t.TempDir(), 1600, 1200)

	for _, key := range []string{"u/first.jpg", "u/again.jpg"} {
		id := c.submit(photo, key)
		l.await([]string{id}, time.Minute)
		if r := l.one(id); !r.Success || r.Metadata == nil || r.Metadata.Reused != (key == "u/again.jpg") {
			t.Fatalf("%s: %+v", key, r)
		}
	}

	// The site blocks this picture by its hash, and reloads clamd (its daily version stays the same).
	data, err := os.ReadFile(photo)
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(data)
	const name = "MediaWorker.Test.SiteBlocked"
	hdb := fmt.Sprintf("%x:%d:%s\n", sum, len(data), name)
	if err := os.WriteFile(filepath.Join(clamd.Dir, "db", "site.hdb"), []byte(hdb), 0o644); err != nil {
		t.Fatal(err)
	}
	scfg := scanner.DefaultConfig()
	scfg.Addr = clamd.Addr
	s, err := scanner.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	reloadClamd(t, clamd)
	testenv.Eventually(t, time.Minute, func() error {
		v, err := s.ScanFile(context.Background(), photo)
		if err != nil || !v.Infected {
			return fmt.Errorf("clamd has not loaded site.hdb yet: %+v, %v", v, err)
		}
		return nil
	})

	id := c.submit(photo, "u/blocked.jpg")
	l.await([]string{id}, time.Minute)
	r := l.one(id)
	l.mu.Lock()
	events := l.viruses[id]
	l.mu.Unlock()
	if r.Success || !strings.Contains(r.Error, "virus detected: "+name) || len(events) != 1 {
		t.Fatalf("the repeat of a picture clamd now blocks: %+v, virus events %+v", r, events)
	}
	if c.exists("u/blocked.jpg") {
		t.Error("the blocked upload is still in the bucket")
	}
}

// reloadClamd asks clamd to reload its databases (what freshclam and a site's tooling do).
func reloadClamd(t *testing.T, c *testenv.Clamd) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(c.Addr, "tcp://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("zRELOAD\x00")); err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(reply), "RELOADING") {
		t.Fatalf("clamd answered RELOAD with %q", reply)
	}
}

// Item 3: reuse stays in the request's bucket unless the operator shares it. Tenant B's upload of the
// bytes tenant A uploaded is done afresh (no "reused", no read of A's bucket); B's own repeat is
// reused; with --reuse-across-buckets, B is answered from A's.
func TestReuseStaysInItsBucket(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	w := reuseWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	const other = "tenant-b"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.store.EnsureBucket(ctx, other); err != nil {
		t.Fatal(err)
	}
	photo := testenv.MakeJPEG(t, t.TempDir(), 1200, 900)
	answer := func(b, key string) contracts.Response {
		t.Helper()
		if _, err := objstore.UploadFile(ctx, c.store, b, key, photo, "image/jpeg"); err != nil {
			t.Fatal(err)
		}
		req := testenv.NewRequest(b, key)
		testenv.PublishRequest(t, c.js, streams.Subjects().Request, req, jetstream.WithExpectStream(streams.RequestsStream()))
		l.await([]string{req.MediaID}, time.Minute)
		r := l.one(req.MediaID)
		if !r.Success || r.Metadata == nil || len(r.Processed) != 3 {
			t.Fatalf("%s/%s: %+v", b, key, r)
		}
		for _, v := range r.Processed {
			if !strings.Contains(v.URL, "/"+b+"/") {
				t.Errorf("%s/%s: variant URL %s is not in the request's bucket", b, key, v.URL)
			}
		}
		return r
	}

	if r := answer(bucket, "u/a.jpg"); r.Metadata.Reused {
		t.Fatalf("the first upload was reused: %+v", r.Metadata)
	}
	if r := answer(other, "u/b.jpg"); r.Metadata.Reused {
		t.Errorf("tenant B's upload was answered from tenant A's: %+v", r.Metadata)
	}
	if r := answer(other, "u/b-again.jpg"); !r.Metadata.Reused {
		t.Errorf("tenant B's own repeat was not reused: %+v", r.Metadata)
	}

	// Shared across buckets, by the operator's choice.
	w.kill()
	reuseWorker(t, "shared", workerOpts{natsURL: srv.ClientURL(), clamd: clamd}, "--reuse-across-buckets")
	answer(bucket, "u/a-shared.jpg")
	if r := answer(other, "u/b-shared.jpg"); !r.Metadata.Reused {
		t.Errorf("with --reuse-across-buckets, tenant B's upload was not answered from tenant A's: %+v", r.Metadata)
	}
}

// Item 4: a remembered output the store will not show this worker (S3 answers 403, as after the
// bucket's credentials were removed) costs the rework, never the answer: the repeat is done afresh and
// succeeds, where it used to be retried until the worker gave up.
func TestReuseFallsBackWhenARememberedOutputIsForbidden(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	m := testenv.StartS3(t)
	proxy := startForbiddingProxy(t, m.Endpoint)
	reuseWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, s3: m, s3Addr: proxy.Endpoint()})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, m, 1)
	photo := testenv.MakeJPEG(t, t.TempDir(), 1200, 900)

	answer := func(key string) contracts.Response {
		t.Helper()
		id := c.submit(photo, key)
		l.await([]string{id}, 2*time.Minute)
		r := l.one(id)
		if !r.Success || r.Metadata == nil || len(r.Processed) != 3 {
			t.Fatalf("%s: %+v", key, r)
		}
		return r
	}
	first := answer("u/first.jpg")
	if r := answer("u/again.jpg"); !r.Metadata.Reused { // S3's tags hold from Put to Stat
		t.Fatalf("the repeat on S3 was not reused: %+v", r.Metadata)
	}

	// The first upload's outputs become unreadable to the worker.
	proxy.forbid("/" + bucket + "/" + path.Dir(s3KeyOf(t, first.Processed[0].URL)) + "/")
	r := answer("u/third.jpg")
	if r.Metadata.Reused {
		t.Errorf("answered from outputs the store refuses to show: %+v", r.Metadata)
	}
	if proxy.refused() == 0 {
		t.Error("the worker never asked for the forbidden outputs")
	}
	for _, v := range r.Processed {
		img := vipsDecode(t, c.get(s3KeyOf(t, v.URL)), "webp")
		if b := img.Bounds(); b.Dx() != v.Width || b.Dy() != v.Height {
			t.Errorf("variant %s decodes at %v, the answer says %d×%d", v.Quality, b, v.Width, v.Height)
		}
	}
}

// Item 1, what a variant is served as: a client that may write under its own keys on S3 writes its
// variants' very bytes back (the same ETag, the variant marker set) as text/html; a later upload of the
// same bytes by someone else must not get variants that S3 or a CDN serves as text/html (the copy
// keeps its source's Content-Type). It is made afresh, or copied only as what the worker stored.
func TestReuseKeepsTheStoredContentType(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	m := testenv.StartS3(t)
	reuseWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, s3: m})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, m, 1)
	photo := testenv.MakeJPEG(t, t.TempDir(), 1200, 900)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	answer := func(key string) contracts.Response {
		t.Helper()
		id := c.submit(photo, key)
		l.await([]string{id}, 2*time.Minute)
		r := l.one(id)
		if !r.Success || r.Metadata == nil || len(r.Processed) != 3 {
			t.Fatalf("%s: %+v", key, r)
		}
		return r
	}
	for _, v := range answer("u/first.jpg").Processed {
		key := s3KeyOf(t, v.URL)
		var b bytes.Buffer
		if _, err := c.store.Get(ctx, bucket, key, &b); err != nil {
			t.Fatal(err)
		}
		if err := c.store.Put(objstore.AsVariant(ctx), bucket, key, &b, int64(b.Len()), "text/html"); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range answer("u/again.jpg").Processed {
		info, err := c.store.Stat(ctx, bucket, s3KeyOf(t, v.URL))
		if err != nil {
			t.Fatal(err)
		}
		if info.ContentType != "image/webp" {
			t.Errorf("the repeat's %s variant is stored as %q", v.Quality, info.ContentType)
		}
	}
}

// s3KeyOf is the key of a variant's URL on S3 (<endpoint>/<bucket>/<key>).
func s3KeyOf(t *testing.T, u string) string {
	t.Helper()
	_, key, ok := strings.Cut(u, "/"+bucket+"/")
	if !ok {
		t.Fatalf("cannot find the key in %q", u)
	}
	return key
}

// forbiddingProxy is an HTTP proxy in front of the S3 server that answers 403 AccessDenied, as S3 does to
// credentials that lost their access, to every request under a path prefix.
type forbiddingProxy struct {
	ln  net.Listener
	srv *http.Server

	mu      sync.Mutex
	prefix  string
	refusal int
}

func startForbiddingProxy(t *testing.T, target string) *forbiddingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &forbiddingProxy{ln: ln}
	// The Host header stays the proxy's, which the worker signed its requests with.
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	p.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		forbidden := p.prefix != "" && strings.HasPrefix(r.URL.Path, p.prefix)
		if forbidden {
			p.refusal++
		}
		p.mu.Unlock()
		if !forbidden {
			rp.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied.</Message><Resource>%s</Resource></Error>`, r.URL.Path)
		}
	})}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

func (p *forbiddingProxy) Endpoint() string { return p.ln.Addr().String() }

func (p *forbiddingProxy) forbid(prefix string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prefix = prefix
}

func (p *forbiddingProxy) refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusal
}
