package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Issue 24 item 1: what a request's headers say never reaches the worker's bookkeeping. Before,
// a request carrying Mw-Request-Seq: N passed for request N (acked unanswered when N was settled; the
// genuine request N dropped when N was still to come), and one published with the Nats-Msg-Id of a
// future request's lane copy made that copy a "duplicate". Here hostile requests claim the settled
// request's sequence, future sequences and the lane-copy ids of the next forty sequences; every request,
// hostile or genuine, must be answered exactly once.
func TestRequestHeadersNeverReachBookkeeping(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	src := testenv.MakeJPEG(t, t.TempDir(), 160, 120)
	c.upload(src, "u/photo.jpg")

	settled := c.request("u/photo.jpg") // request 1, its lane copy 2
	l.await([]string{settled}, time.Minute)

	ids := []string{settled}
	hostile := func(h nats.Header) {
		req := testenv.NewRequest(bucket, "u/photo.jpg")
		data, _ := json.Marshal(req)
		m := &nats.Msg{Subject: streams.Subjects().Request, Data: data, Header: h}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if h.Get(jetstream.MsgIDHeader) == "" {
			m.Header.Set(jetstream.MsgIDHeader, req.MediaID)
		}
		if _, err := l.js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publishing a request with headers %v: %v", h, err)
		}
		ids = append(ids, req.MediaID)
	}
	// The settled request's sequence, and sequences still to come.
	hostile(nats.Header{natsjs.HeaderRequestSeq: {"1"}})
	for _, seq := range []int{6, 9, 12, 15} {
		hostile(nats.Header{natsjs.HeaderRequestSeq: {fmt.Sprint(seq)}, natsjs.HeaderPublishedAt: {"2000-01-01T00:00:00Z"}})
	}
	// The lane-copy ids the worker used to derive from the stream and sequence alone.
	for seq := 3; seq <= 40; seq++ {
		hostile(nats.Header{jetstream.MsgIDHeader: {fmt.Sprintf("route/%s/%d/image", streams.RequestsStream(), seq)}})
	}
	// Genuine requests, which get the sequences claimed above.
	for range 10 {
		ids = append(ids, c.request("u/photo.jpg"))
	}

	l.await(ids, 3*time.Minute)
	for _, id := range ids {
		if r := l.one(id); !r.Success {
			t.Errorf("%s: %+v, want success", id, r)
		}
	}
	l.awaitEmptyQueue(10 * time.Second)
	if n := l.total(); n != len(ids) {
		t.Errorf("%d responses stored for %d requests, want one each", n, len(ids))
	}
}

// Issue 24 item 3: app prefixes that map to the same stream names ("site-a" and "site_a": both
// SITE_A_MEDIA_*) cannot collide. Before, starting the second rewrote the first's subjects and consumer
// filters; now it refuses to start, naming both prefixes, and the first site's streams are unchanged.
func TestCollidingAppPrefixesAreRefused(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	startWorker(t, "site-a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, args: []string{"--app", "site-a"}})
	l := newLedger(t, srv.ClientURL())

	for _, other := range []string{"site_a", "SITE-A"} {
		b := &workerProc{t: t, name: other, opts: workerOpts{natsURL: srv.ClientURL(), clamd: clamd, tmpDir: t.TempDir(),
			args: []string{"--app", other}}, logPath: t.TempDir() + "/" + other + ".log"}
		b.launch()
		select {
		case <-b.done:
		case <-time.After(60 * time.Second):
			b.kill()
			t.Fatalf("--app %s started beside --app site-a; want a refusal", other)
		}
		log, _ := os.ReadFile(b.logPath)
		refusal := ""
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "belongs to another app prefix") {
				refusal = line
			}
		}
		if b.exitStatus() == 0 || !strings.Contains(refusal, "site-a") || !strings.Contains(refusal, other) {
			t.Errorf("--app %s beside --app site-a: exit %d, log:\n%s\nwant a refusal naming both prefixes", other, b.exitStatus(), testenv.TailLines(log, 10))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := l.js.Stream(ctx, "SITE_A_MEDIA_REQUESTS")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Subjects; len(got) == 0 || got[0] != "site-a.media.optimize.request" {
		t.Errorf("site-a's requests stream now has subjects %v", got)
	}
	cons, err := s.Consumer(ctx, "mediaworker")
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.FilterSubject; got != "site-a.media.optimize.request" {
		t.Errorf("site-a's triage consumer now filters %q", got)
	}
}

// Issue 24 item 4: big requests end with one true answer. A request just under the server's 1 MiB
// payload limit was never answered nor dead-lettered (its DLQ copy, with headers, did not fit), and a
// slightly smaller one was transformed on every delivery and then its response (which echoes mediaUrl)
// did not fit either. Now requests over the documented limit are refused with a short answer, and a
// payload with no mediaId to answer is dead-lettered, cut to fit, at once.
func TestBigRequestsEndWithOneAnswer(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	c.upload(testenv.MakeJPEG(t, t.TempDir(), 160, 120), "u/photo.jpg")

	limit := int(l.nc.MaxPayload())
	var ids []string
	for _, size := range []int{limit - 300, limit - 64<<10, 200 << 10} {
		req := testenv.NewRequest(bucket, "u/photo.jpg")
		base, _ := json.Marshal(req)
		req.MediaURL += "?pad=" + strings.Repeat("a", size-len(base)-len("?pad="))
		data, _ := json.Marshal(req)
		c.publish(data, req.MediaID)
		ids = append(ids, req.MediaID)
	}
	blob := []byte(`{"pad":"` + strings.Repeat("b", limit-400) + `"}`) // no mediaId: nobody to answer
	c.publish(blob, "blob")
	good := c.request("u/photo.jpg")

	l.await(append(ids, good), 2*time.Minute)
	for _, id := range ids {
		r := l.one(id)
		if r.Success || !strings.Contains(r.Error, "bytes") || len(r.OriginalURL) > 4096 {
			t.Errorf("%s: success=%v error=%q originalUrl %d bytes; want a short refusal naming the size", id, r.Success, r.Error, len(r.OriginalURL))
		}
	}
	if r := l.one(good); !r.Success {
		t.Errorf("the request after the big ones: %+v", r)
	}
	l.awaitDLQ(1, 30*time.Second)
	if dl := l.deadLetters(); len(dl) != 1 || !strings.HasPrefix(string(dl[0].data), `{"pad":"bbb`) {
		t.Errorf("dead letters: %d, want the payload without a mediaId", len(dl))
	}
	l.awaitEmptyQueue(10 * time.Second)
	if info := l.consumer(); info.NumRedelivered != 0 {
		t.Errorf("%d redeliveries: a big request was handed back instead of answered", info.NumRedelivered)
	}
}

// Issue 24 items 2, 10 and 11 (the request's part), against the built binary: the quarantine bucket
// and the worker's own variants are not inputs, a bucket name S3 would refuse is refused at once (not
// retried for ten minutes), invalid UTF-8 in a key is refused rather than silently replaced and "not
// found", and a javascript: mediaUrl is refused and never echoed. Each ends in exactly one answer
// naming what to fix; the worker then still transforms a photo.
func TestHostileRequestsAreRefusedWithOneAnswer(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, args: []string{"--quarantine-bucket", "quarantine", "--max-deliver", "3"}})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	src := testenv.MakeJPEG(t, t.TempDir(), 160, 120)
	c.upload(src, "u/photo.jpg")

	// A success first, so its variants exist to be requested.
	first := c.request("u/photo.jpg")
	l.await([]string{first}, time.Minute)
	variant := l.one(first).Processed[0].URL
	variantKey := variant[strings.Index(variant, "/u/")+1:]
	if i := strings.IndexByte(variantKey, '?'); i >= 0 {
		variantKey = variantKey[:i]
	}

	cases := []struct {
		name, raw, want string
	}{
		{"quarantine bucket", `{"mediaId":"%s","s3Key":"u/photo.jpg","s3Bucket":"quarantine","mediaUrl":"https://api.example/m/1"}`, "quarantine bucket"},
		{"own variant", `{"mediaId":"%s","s3Key":"` + variantKey + `","s3Bucket":"media","mediaUrl":"https://api.example/m/1"}`, "output of this worker"},
		{"S3 bucket rules", `{"mediaId":"%s","s3Key":"u/photo.jpg","s3Bucket":"Media_Upper","mediaUrl":"https://api.example/m/1"}`, "s3Bucket"},
		{"invalid UTF-8 key", "{\"mediaId\":\"%s\",\"s3Key\":\"u/ph\xffoto.jpg\",\"s3Bucket\":\"media\",\"mediaUrl\":\"https://api.example/m/1\"}", "UTF-8"},
		{"javascript: mediaUrl", `{"mediaId":"%s","s3Key":"u/photo.jpg","s3Bucket":"media","mediaUrl":"javascript:alert(1)"}`, "mediaUrl"},
	}
	var ids []string
	for _, tc := range cases {
		id := uuidLike(t)
		c.publish([]byte(fmt.Sprintf(tc.raw, id)), id)
		ids = append(ids, id)
	}
	good := c.request("u/photo.jpg")
	l.await(append(ids, good), time.Minute)
	for i, tc := range cases {
		r := l.one(ids[i])
		if r.Success || !strings.Contains(r.Error, tc.want) || strings.HasPrefix(r.OriginalURL, "javascript:") {
			t.Errorf("%s: success=%v error=%q originalUrl=%q; want a refusal naming %q", tc.name, r.Success, r.Error, r.OriginalURL, tc.want)
		}
	}
	if r := l.one(good); !r.Success {
		t.Errorf("a photo after the hostile requests: %+v", r)
	}
	if info := l.consumer(); info.NumRedelivered != 0 {
		t.Errorf("%d redeliveries: a refusal was retried", info.NumRedelivered)
	}
	if n := len(l.deadLetters()); n != 0 {
		t.Errorf("%d dead letters; every hostile request here names a mediaId and must be answered", n)
	}
	if !c.exists("u/photo.jpg") {
		t.Error("the upload was removed")
	}
}

func uuidLike(t *testing.T) string {
	t.Helper()
	return testenv.NewRequest(bucket, "x").MediaID
}

// Issue 24 items 9 and 11 (the media's part), against the built binary: a small picture carrying 45 MB
// of EXIF is refused before a decoder reads it, naming the metadata; a 60000×60000 AVIF says it is over
// the pixel limit, not "truncated"; a valid 1-pixel-wide video is transcoded, not "damaged".
func TestHostileMediaGetAnswersThatFit(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	dir := t.TempDir()

	bomb := c.submit(testenv.MakeJPEGWithSegments(t, dir, "bomb.jpg", 0xE1, 700, 65533), "u/bomb.jpg")
	avif := c.submit(testenv.MakeAVIFDeclaring(t, dir, "huge.avif", 60000, 60000), "u/huge.avif")
	thin := c.submit(testenv.MakeThinVideo(t, dir, "thin.mp4", 1, 64), "u/thin.mp4")
	l.await([]string{bomb, avif, thin}, 2*time.Minute)

	if r := l.one(bomb); r.Success || !strings.Contains(r.Error, "metadata") || !strings.Contains(r.Error, "16 MiB") {
		t.Errorf("45 MB of EXIF: %+v; want a refusal naming the metadata and its limit", r)
	}
	if r := l.one(avif); r.Success || !strings.Contains(r.Error, "60000×60000") || strings.Contains(r.Error, "truncated") {
		t.Errorf("a 60000×60000 AVIF: %+v; want the pixel limit", r)
	}
	r := l.one(thin)
	if !r.Success || r.Metadata == nil || r.Metadata.Width < 1 {
		t.Fatalf("a 1-pixel-wide video: %+v; want it transcoded", r)
	}
	if info := l.consumer(); info.NumRedelivered != 0 {
		t.Errorf("%d redeliveries: a refusal was retried", info.NumRedelivered)
	}
}
